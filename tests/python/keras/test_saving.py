"""A model trained with a DistributedOptimizer is saved as if with the plain optimizer: a process
that never imports hora loads it back, optimizer state included; hvd.load_model loads it with
the optimizer wrapped again, ready to train on."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow.keras as hvd
from keras_helpers import assert_all_close, fit, gathered, global_data, keras_generation, mlp, rank_share

FORMATS = [".keras"] + ([".h5"] if keras_generation() < 3 else [])


def trained(tmp_path, suffix, optimizer):
    x, y = global_data(2, 4)
    model = mlp(tf.keras)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer), loss="mse")
    fit(model, rank_share(x, 2, 4), rank_share(y, 2, 4), 4)
    path = str(tmp_path / f"model-{hvd.rank()}{suffix}")
    model.save(path)
    return model, path


def optimizer_state(optimizer):
    """The optimizer's variables' values in its order (names differ: they hold layer names, which
    Keras numbers per process)."""
    return [np.asarray(v.numpy()).tolist() for v in optimizer.variables]


LOAD_WITHOUT_HORA = """
import json, sys
import tensorflow as tf
for path in sys.argv[1:]:
    model = tf.keras.models.load_model(path)
    opt = model.optimizer
    print(json.dumps(dict(cls=type(opt).__module__ + '.' + type(opt).__name__,
                          bases=[b.__module__ for b in type(opt).__mro__],
                          lr=float(opt.learning_rate.numpy()), iterations=int(opt.iterations.numpy()),
                          weights=[w.tolist() for w in model.get_weights()])))
assert not any(name == 'hora' or name.startswith('hora.') for name in sys.modules), 'hora was imported'
"""


@pytest.fixture(scope="module")
def loaded_without_hora(tmp_path_factory):
    """Models saved in each format, and what one process that never imports hora read back."""
    tmp_path = tmp_path_factory.mktemp("saved")
    saved = [trained(tmp_path, suffix, tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9))
             for suffix in FORMATS]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_HORA] + [path for _, path in saved],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()[-len(FORMATS):]
    return {suffix: (model, json.loads(line)) for suffix, (model, _), line in zip(FORMATS, saved, lines)}


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_saved_model_loads_without_hora(loaded_without_hora, suffix):
    model, loaded = loaded_without_hora[suffix]
    assert loaded["cls"] == type(model.optimizer).__module__ + ".SGD"
    assert not any(b.startswith("hora") for b in loaded["bases"])
    assert loaded["lr"] == pytest.approx(0.05) and loaded["iterations"] == 2
    assert_all_close([np.array(w) for w in loaded["weights"]], model.get_weights(), rtol=1e-6)


@pytest.mark.parametrize("suffix", FORMATS)
def test_load_model_wraps_the_optimizer_again(tmp_path, suffix):
    model, path = trained(tmp_path, suffix, tf.keras.optimizers.Adam(learning_rate=0.01))
    loaded = hvd.load_model(path)
    opt = loaded.optimizer
    state_matches = optimizer_state(opt) == optimizer_state(model.optimizer)
    # Training on goes through the allreduce: the ranks' different data leave equal weights.
    rs = np.random.RandomState(50 + hvd.rank())
    fit(loaded, rs.randn(4, 5).astype(np.float32), rs.randn(4, 3).astype(np.float32), 4)
    everyone = gathered(loaded.get_weights())
    assert isinstance(opt, tf.keras.optimizers.Adam) and hasattr(opt, "register_local_var")
    assert opt.get_config()["learning_rate"] == pytest.approx(0.01)
    assert state_matches, (optimizer_state(opt), optimizer_state(model.optimizer))
    for weights in everyone:
        assert_all_close(weights, everyone[0], rtol=0, atol=0)


def test_load_model_wraps_custom_optimizers(tmp_path):
    class Custom(tf.keras.optimizers.SGD):
        pass

    model = mlp(tf.keras)
    model.compile(optimizer=Custom(learning_rate=0.3), loss="mse")
    x, y = global_data(1, 4)
    fit(model, x, y, 4)
    path = str(tmp_path / f"custom-{hvd.rank()}.keras")
    model.save(path)
    loaded = hvd.load_model(path, custom_optimizers=[Custom])
    assert isinstance(loaded.optimizer, Custom) and hasattr(loaded.optimizer, "register_local_var")
    assert loaded.optimizer.get_config()["learning_rate"] == pytest.approx(0.3)
