"""hora.tensorflow.keras and hora.keras on every rank of a job, under the Keras generation of the
python that runs them: `horarun -np 2 python -m pytest tests/python/keras` with .venv (Keras 2)
and with .venv-tf2 (Keras 3); scripts/test.sh runs both. A plain pytest run is a job of one.
Every test makes the same collectives in the same order on every rank and asserts after its
last collective, so a failing rank never leaves the others waiting."""

import pytest
import tensorflow as tf

import hora.tensorflow.keras as hvd


@pytest.fixture(scope="session", autouse=True)
def hora_job():
    hvd.init()
    # Two ranks share two cores: one TensorFlow thread each.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    yield
    hvd.shutdown()
