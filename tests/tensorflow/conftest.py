"""hora.tensorflow's tests, run on every rank of a job: `horarun -np N <venv>/bin/python -m pytest
tests/tensorflow` (scripts/test.sh runs them at 1, 2 and 3 ranks under TensorFlow 2.15 in .venv
and at 2 under the newest TensorFlow in .venv-tf2). Every test calls the same collectives in the
same order on every rank, and compares with numpy references computed from every rank's
inputs, which each rank can recompute (per_rank)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import hora.tensorflow as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def hora_job():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    yield
    hvd.shutdown()


@pytest.fixture(params=["eager", "function"])
def mode(request):
    """Runs a test's collectives eagerly, or traced into one tf.function."""
    return request.param


def run(mode, fn, *args):
    """fn(*args) eagerly, or inside a tf.function (traced for this call), as numpy."""
    result = fn(*args) if mode == "eager" else tf.function(fn)(*args)
    return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, result)


def per_rank(r, shape, dtype, seed=0):
    """Rank r's deterministic input as numpy: floats in [-5, 5), integers in [-3, 4) ([0, 4)
    for unsigned), bools."""
    rng = np.random.default_rng(1000 * seed + r)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind == "f":
        return (rng.random(shape) * 10 - 5).astype(dtype)
    low = 0 if dtype.kind == "u" else -3
    return rng.integers(low, 4, shape).astype(dtype)


def all_inputs(shape, dtype, seed=0):
    return [per_rank(r, shape, dtype, seed) for r in range(hvd.size())]
