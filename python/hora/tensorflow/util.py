"""Helpers of horovod.tensorflow.util: whether TensorFlow runs eagerly, and functions made once
and compiled with tf.function (so that the collectives of one call run concurrently and the
engine fuses them)."""

import tensorflow as tf
from tensorflow.python.eager import context


def _executing_eagerly():
    """True when TensorFlow executes eagerly here (False while tf.function traces)."""
    return context.executing_eagerly()


def _make_subgraph(f):
    return tf.function(f)


def _cache(f):
    """f(*args), computed once per (args, eager or not)."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def _tf_variable(v):
    """The tf.Variable behind a Keras 3 variable (which is no tf.Variable, has no ref() and is
    not hashable), or v itself."""
    if not isinstance(v, tf.Variable) and isinstance(getattr(v, "value", None), tf.Variable):
        return v.value
    return v


def _key(v):
    """A hashable key of a variable or tensor, the same for a Keras 3 variable and its tf.Variable."""
    return _tf_variable(v).ref()


def vars_to_refs(vars):  # (Horovod's name for the argument, though it hides the builtin)
    """Hashable references of (nested lists of) variables, for _cache's keys."""
    if isinstance(vars, list):
        return tuple(vars_to_refs(v) for v in vars)
    return _key(vars)


def refs_to_vars(refs):
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()


def build_optimizer_slots(optimizer, variables):
    """Creates the optimizer's slots (momentum, ...) if it has not applied a step yet. Keras makes
    them at the first apply, so a worker that joins a running job has none while the others
    have theirs (the broadcast of the optimizer's variables would not match across ranks), and
    in ps-async, where the wrapped optimizer never applies, they would not exist to hold the
    servers' state."""
    if getattr(optimizer, "built", False) or getattr(optimizer, "_built", False):
        return
    if hasattr(optimizer, "_create_all_weights"):  # Keras 2's legacy optimizers (OptimizerV2)
        optimizer._create_all_weights(variables)
    elif hasattr(optimizer, "build"):  # Keras 2.11+'s and Keras 3's optimizers
        optimizer.build(variables)
