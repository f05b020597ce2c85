"""Errors as TensorFlow errors: a disagreement between ranks fails on every rank with
tf.errors.FailedPreconditionError naming the tensor (eagerly and in tf.function), bad arguments
are InvalidArgumentError at the calling rank, and the job goes on afterwards."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow as hvd
from conftest import run


def test_shape_mismatch_names_the_tensor_on_every_rank(mode):
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    x = tf.ones([hvd.rank() + 1])
    with pytest.raises(tf.errors.FailedPreconditionError, match="mismatched_shapes"):
        run(mode, lambda t: hvd.allreduce(t, name="mismatched_shapes"), x)
    # the job goes on
    np.testing.assert_allclose(run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), tf.ones([2])), [hvd.size()] * 2)


def test_type_and_root_mismatch(mode):
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    x = tf.ones([2], tf.float32 if hvd.rank() == 0 else tf.float64)
    with pytest.raises(tf.errors.FailedPreconditionError, match="mismatched_types"):
        run(mode, lambda t: hvd.allreduce(t, name="mismatched_types"), x)
    with pytest.raises(tf.errors.FailedPreconditionError, match="mismatched_roots"):
        run(mode, lambda t: hvd.broadcast(t, hvd.rank(), name="mismatched_roots"), tf.ones([2]))


def test_bad_arguments_are_invalid_argument(mode):
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits has"):
        run(mode, lambda t: hvd.alltoall(t, splits=tf.constant([1] * (hvd.size() + 1), tf.int32)), tf.ones([9]))
    if hvd.size() > 1:
        with pytest.raises(tf.errors.InvalidArgumentError, match="not a multiple"):
            run(mode, lambda t: hvd.alltoall(t), tf.ones([hvd.size() + 1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="root_rank"):
        run(mode, lambda t: hvd.broadcast(t, hvd.size() + 3), tf.ones([2]))


def test_a_scalar_cannot_be_reduce_scattered(mode):
    with pytest.raises(tf.errors.FailedPreconditionError, match="rank-zero"):
        run(mode, lambda t: hvd.reducescatter(t), tf.constant(1.0))


def test_a_type_hora_cannot_reduce_is_refused_before_running():
    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
        hvd.allreduce(tf.constant(["a"]))


def test_a_function_compiled_by_xla_is_refused_when_traced_naming_jit_compile():
    # The same ops in a plain tf.function run; under jit_compile=True XLA would fail at run time
    # listing unsupported ops, so hora refuses at trace time and says what to change.
    with pytest.raises(ValueError, match="jit_compile=False"):
        tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum), jit_compile=True)(tf.ones([2]))
    with pytest.raises(ValueError, match="HoraAllgather"):
        tf.function(lambda t: hvd.allgather(t), jit_compile=True)(tf.ones([2]))
    np.testing.assert_allclose(tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum))(tf.ones([2])), [hvd.size()] * 2)


def test_collectives_before_init_fail_with_failed_precondition():
    code = ("import tensorflow as tf, hora.tensorflow as hvd\n"
            "try:\n    hvd.allreduce(tf.ones([1]))\n"
            "except tf.errors.FailedPreconditionError as e:\n    print('refused:', e.message)\n")
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "refused:" in out.stdout and "hora has not been initialized; call hvd.init()" in out.stdout, out.stderr
