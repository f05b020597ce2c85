"""Which Keras generation an object belongs to, and the few accessors that differ between them.

hora supports two generations of Keras at once, and one process may hold both (TensorFlow 2.16+
with `tf_keras` and TF_USE_LEGACY_KERAS=1: `tf.keras` is Keras 2 while `keras` is Keras 3):
- Keras 2: the `keras` package up to 2.15 (TensorFlow <= 2.15's tf.keras) and `tf_keras`.
  model.fit calls optimizer.minimize(), which computes the gradients through the optimizer.
- Keras 3: the `keras` package 3.x (the tf.keras of TensorFlow >= 2.16). model.fit computes the
  gradients itself and calls optimizer.apply_gradients() -> apply(); keras.backend has no
  get_value/set_value, and an optimizer's variables are a list property.
So the generation is read from the package that defined an object's class, never from a global.
"""

import sys

_KERAS_PACKAGES = ("keras", "tf_keras")


def keras_generation(cls):
    """2 or 3: the major version of the Keras package that defined `cls` or its nearest Keras
    base class (a user's subclass of keras.optimizers.SGD lives in the user's module)."""
    for klass in cls.__mro__:
        package = klass.__module__.split(".")[0]
        if package in _KERAS_PACKAGES:
            return int(sys.modules[package].__version__.split(".")[0])
    raise ValueError(f"{cls.__module__}.{cls.__qualname__} is not a Keras class (expected a subclass of a class "
                     "of the keras or tf_keras package)")


def module_generation(keras):
    """2 or 3 for a Keras API module: tf.keras, keras or tf_keras."""
    return keras_generation(keras.callbacks.Callback)


def optimizer_variables(optimizer):
    """The optimizer's variables as a list: a method in Keras 2's legacy optimizers, a property
    in the Keras 2.11+ optimizers and in Keras 3."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def is_variable(value):
    """A tf.Variable or a Keras 3 variable: a value that a traced train step reads at run time, so
    that assigning it takes effect without retracing (a Python float is baked in at trace time)."""
    return hasattr(value, "assign") and hasattr(value, "numpy")


def to_float(value):
    """A scalar variable, tensor or number as a Python float (Keras 3 has no backend.get_value)."""
    return float(value.numpy()) if hasattr(value, "numpy") else float(value)


def variable_key(variable):
    """A hashable identity for a variable: tf.Variable.ref() where there is one; Keras 3
    variables overload == elementwise, so they are keyed by object identity."""
    return variable.ref() if hasattr(variable, "ref") else id(variable)
