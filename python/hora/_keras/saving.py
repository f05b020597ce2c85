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
    """
    Loads a saved Keras model with a Horovod DistributedOptimizer.

    The DistributedOptimizer will wrap the underlying optimizer used to train
    the saved model, so that the optimizer state (params and weights) will
    be picked up for retraining.

    By default, all optimizers in the module `keras.optimizers` will be loaded
    and wrapped without needing to specify any `custom_optimizers` or
    `custom_objects`.

    Arguments:
        filepath: One of the following:
            - string, path to the saved model, or
            - h5py.File object from which to load the model
        custom_optimizers: Optional list of Optimizer subclasses to support
            during loading.
        custom_objects: Optional dictionary mapping names (strings) to custom
            classes or functions to be considered during deserialization.
        compression: Compression algorithm used to reduce the amount of data
                     sent and received by each worker node.  Defaults to not
                     using compression.
        legacy_opts: If True, model uses tf.keras.optimizers.legacy.* optimizers

    Returns:
        A Keras model instance.

    Raises:
        ImportError: If h5py is not available.
        ValueError: In case of an invalid savefile.
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
