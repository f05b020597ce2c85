"""load_model: a saved Keras model whose optimizer comes back as a DistributedOptimizer."""

import hora.tensorflow as hvd
from hora._keras.optimizer import DistributedOptimizer


class _WrappingFactory:
    """Stands for an optimizer class while a model is loaded: Keras builds the optimizer through
    from_config() (Keras 3 insists on it) or by calling the class with the config (Keras 2), and
    either way gets the optimizer wrapped in a DistributedOptimizer."""

    def __init__(self, cls, compression):
        self.cls = cls
        self.compression = compression

    def __call__(self, **config):
        return DistributedOptimizer(self.cls(**config), compression=self.compression)

    def from_config(self, config, custom_objects=None):
        return DistributedOptimizer(self.cls.from_config(config), compression=self.compression)


def load_model_for(keras):
    """hvd.load_model of the module whose Keras is `keras` (tf.keras, keras or tf_keras)."""

    def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=hvd.Compression.none,
                   legacy_opts=False):
        return _load_model(keras, filepath, custom_optimizers, custom_objects, compression, legacy_opts)

    load_model.__doc__ = _load_model.__doc__
    return load_model


def _load_model(keras, filepath, custom_optimizers, custom_objects, compression, legacy_opts):
    """Loads a model saved with a (distributed or plain) optimizer and returns it with that
    optimizer wrapped in DistributedOptimizer, its state (slots, iterations) kept, ready to train
    on.

    Arguments: `filepath` is what keras.models.load_model takes (a .keras, .h5 or SavedModel
    path, or an open h5py.File); every optimizer class of keras.optimizers (of
    keras.optimizers.legacy when `legacy_opts`) is wrapped without being named;
    `custom_optimizers` lists other Optimizer classes to wrap, `custom_objects` the model's own
    layers, losses or functions; `compression` is the wrapped optimizer's (Compression.none by
    default). Errors are load_model's (ValueError for a file that is no saved model).
    """
    base = keras.optimizers.legacy.Optimizer if legacy_opts else keras.optimizers.Optimizer
    objects = {}
    # Keras looks a built-in optimizer up by its lower-cased name in one code path and by its
    # class name in another; both names lead to the wrapping factory.
    for cls in base.__subclasses__():
        objects[cls.__name__.lower()] = objects[cls.__name__] = _WrappingFactory(cls, compression)
    for cls in custom_optimizers or []:
        objects[cls.__name__] = _WrappingFactory(cls, compression)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)
