"""Models and data that every rank can rebuild for every other rank, and the single-process
references the distributed results are compared with."""

import importlib

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow.keras as hvd

IN, OUT = 5, 3

# (hora module, its Keras): hora.tensorflow.keras follows tf.keras, hora.keras the keras package.
# In both test environments the keras package is tf.keras's Keras, so tests run hora.keras
# once per feature, to check its binding.
TF_KERAS, KERAS = ("hora.tensorflow.keras", "tf.keras"), ("hora.keras", "keras")
APIS = [pytest.param(TF_KERAS, id="tf.keras"), pytest.param(KERAS, id="keras")]


def api_modules(names):
    hora_name, keras_name = names
    keras = tf.keras if keras_name == "tf.keras" else importlib.import_module("keras")
    return importlib.import_module(hora_name), keras


def keras_generation(keras=tf.keras):
    version = getattr(keras, "__version__", None) or importlib.import_module("keras").__version__
    return int(version.split(".")[0])


def mlp(keras, seed=0, hidden=4):
    """IN -> hidden (tanh) -> OUT, its weights drawn from `seed`: the same model on every rank
    (or, with a per-rank seed, a different one)."""
    model = keras.Sequential([keras.Input(shape=(IN,)), keras.layers.Dense(hidden, activation="tanh"),
                              keras.layers.Dense(OUT)])
    rs = np.random.RandomState(seed)
    model.set_weights([rs.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
    return model


def global_data(steps, batch, seed=1):
    """The job's data: `steps` global batches of size() * batch rows."""
    rs = np.random.RandomState(seed)
    n = steps * hvd.size() * batch
    return rs.randn(n, IN).astype(np.float32), rs.randn(n, OUT).astype(np.float32)


def rank_share(array, steps, batch, r=None):
    """Rank r's part of each global batch: rows r*batch ... (r+1)*batch - 1 of every one of them,
    so that its step s sees its slice of global batch s."""
    r = hvd.rank() if r is None else r
    per_step = array.reshape(steps, hvd.size(), batch, *array.shape[1:])
    return per_step[:, r].reshape(steps * batch, *array.shape[1:])


def fit(model, x, y, batch, **kwargs):
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, **kwargs)
    return model


def gathered(values):
    """Every rank's copy of a list of arrays, through allgather: [rank][i]."""
    flat = np.concatenate([np.ravel(v) for v in values]).astype(np.float64)
    everyone = hvd.allgather(flat[None, :]).numpy()
    return [split_like(row, values) for row in everyone]


def split_like(flat, values):
    out, start = [], 0
    for v in values:
        size = int(np.prod(np.shape(v)))
        out.append(flat[start:start + size].reshape(np.shape(v)))
        start += size
    return out


def assert_all_close(actual, expected, **tolerance):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, **tolerance)
