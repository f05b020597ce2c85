"""The callbacks in model.fit, each against a reference computed without it: numpy for the
broadcast and the metric averages, the schedule's formula for the learning rates (read back from
the weight updates, so a rate that the traced train step did not see fails)."""

import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow.keras as hvd
from keras_helpers import APIS, KERAS, TF_KERAS, api_modules, assert_all_close, gathered, keras_generation

STEPS = 4


class Recorder(tf.keras.callbacks.Callback):
    """Calls fn(self, batch) at each batch end: what the other callbacks left is read there."""

    def __init__(self, on_batch_end=None, on_epoch_end=None):
        super().__init__()
        self.batches, self.epochs = [], []
        self._batch, self._epoch = on_batch_end, on_epoch_end

    def on_batch_end(self, batch, logs=None):
        if self._batch:
            self.batches.append(self._batch(self.model))

    def on_epoch_end(self, epoch, logs=None):
        if self._epoch:
            self.epochs.append(self._epoch(logs))


def linear_mse_gradient(w, b, x, y):
    """d/dw, d/db of mean((x w + b - y)^2) for a Dense(1) layer."""
    residual = x @ w + b - y
    return 2 * x.T @ residual / residual.size, 2 * residual.mean(axis=0)


def rank_linear(r):
    """Rank r's own initial weights of a Dense(1) on 3 inputs, and its own data."""
    rs = np.random.RandomState(100 + r)
    w, b = rs.randn(3, 1).astype(np.float32), rs.randn(1).astype(np.float32)
    x, y = rs.randn(2 * 8, 3).astype(np.float32), rs.randn(2 * 8, 1).astype(np.float32)
    return w, b, x, y


@pytest.mark.parametrize("names", APIS)
def test_broadcast_makes_differing_initial_weights_rank_0s(names):
    """Every rank starts from its own weights. The first step's averaged gradient is applied to
    each rank's own weights, then rank 0's are broadcast; the second step starts from those."""
    hvd_api, keras = api_modules(names)
    lr = 0.1
    w, b, x, y = rank_linear(hvd.rank())
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
    model.set_weights([w, b])
    model.compile(optimizer=hvd_api.DistributedOptimizer(keras.optimizers.SGD(learning_rate=lr)), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd_api.callbacks.BroadcastGlobalVariablesCallback(0)])
    everyone = gathered(model.get_weights())

    ranks = [rank_linear(r) for r in range(hvd.size())]
    expected_w, expected_b = ranks[0][0].astype(np.float64), ranks[0][1].astype(np.float64)
    for step in range(2):
        own = [linear_mse_gradient(expected_w if step else rw, expected_b if step else rb,
                                   rx[8 * step:8 * step + 8], ry[8 * step:8 * step + 8])
               for rw, rb, rx, ry in ranks]
        expected_w = expected_w - lr * np.mean([g[0] for g in own], axis=0)
        expected_b = expected_b - lr * np.mean([g[1] for g in own], axis=0)
    for weights in everyone:
        assert_all_close(weights, [expected_w, expected_b], rtol=1e-5, atol=1e-6)


def test_broadcast_covers_the_optimizer_state_and_skips_local_variables():
    """A plain optimizer (no allreduce): after one step each rank's momentum differs; the
    callback makes it rank 0's, and leaves the layer registered as local alone."""
    w, b, x, y = rank_linear(hvd.rank())
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(1), tf.keras.layers.Dense(1)])
    model.set_weights([w, b, np.full((1, 1), hvd.rank() + 2.0, np.float32), np.zeros(1, np.float32)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss="mse")
    local = model.layers[1].kernel
    model.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])])
    state = [model.layers[0].kernel.numpy(), local.numpy()]
    momentum = [v.numpy() for v in model.optimizer.variables if tuple(v.shape) == (3, 1)]
    everyone = gathered(state + momentum)
    assert len(momentum) == 1
    for r, (kernel, local_kernel, slot) in enumerate(everyone):
        np.testing.assert_array_equal(kernel, everyone[0][0])
        np.testing.assert_array_equal(slot, everyone[0][2])
        if r:
            assert not np.allclose(local_kernel, everyone[0][1])


@pytest.mark.parametrize("names", APIS)
def test_metric_average_is_the_mean_of_every_ranks_metrics(names):
    hvd_api, keras = api_modules(names)
    w, b, x, y = rank_linear(hvd.rank())
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
    model.set_weights([w, b])  # differing weights: the ranks' metrics differ
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse", metrics=["mae"])
    before = Recorder(on_epoch_end=dict)
    after = Recorder(on_epoch_end=dict)
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0, validation_data=(x[:4], y[:4]),
                        callbacks=[before, hvd_api.callbacks.MetricAverageCallback(), after])
    keys = sorted(before.epochs[0])
    raw = [np.array([logs[k] for k in keys], np.float64) for logs in before.epochs]
    everyone = gathered(raw)  # [rank][epoch][metric]
    assert set(keys) >= {"loss", "mae", "val_loss", "val_mae"}
    for epoch, logs in enumerate(after.epochs):
        expected = np.mean([everyone[r][epoch] for r in range(hvd.size())], axis=0)
        np.testing.assert_allclose([logs[k] for k in keys], expected, rtol=1e-5)
        # Callbacks after it, History among them, see the averages.
        np.testing.assert_allclose([history.history[k][epoch] for k in keys], expected, rtol=1e-5)


def lr_probe(keras, optimizer, callbacks, epochs=3, steps=STEPS):
    """Trains w (one weight, starting at 0) on the loss mean(w * x) with x = 1: every SGD step
    lowers w by exactly the learning rate it used. Returns those rates per batch, and the logs."""
    model = keras.Sequential([keras.Input(shape=(1,)), keras.layers.Dense(1, use_bias=False,
                                                                         kernel_initializer="zeros")])
    model.compile(optimizer=optimizer, loss=lambda y_true, y_pred: tf.reduce_mean(y_pred))
    weight = Recorder(on_batch_end=lambda m: float(m.get_weights()[0][0, 0]))
    logs = Recorder(on_epoch_end=dict)
    ones = np.ones((steps * 2, 1), np.float32)
    model.fit(ones, ones, batch_size=2, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks + [weight, logs])
    w = np.array([0.0] + weight.batches)
    return -np.diff(w).reshape(epochs, steps), logs.epochs


@pytest.mark.parametrize("names,staircase", [(TF_KERAS, True), (TF_KERAS, False), (KERAS, False)],
                         ids=["per-epoch", "per-batch", "hora.keras-per-batch"])
def test_learning_rate_schedule(names, staircase):
    hvd_api, keras = api_modules(names)
    multiplier = lambda epoch: 0.5 ** epoch  # noqa: E731
    schedule = hvd_api.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=multiplier, start_epoch=1,
                                                              end_epoch=3, staircase=staircase)
    optimizer = hvd_api.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.1))
    rates, logs = lr_probe(keras, optimizer, [schedule], epochs=4)
    expected = np.full((4, STEPS), 0.1)
    for epoch in (1, 2):
        for batch in range(STEPS):
            expected[epoch, batch] = 0.1 * multiplier(epoch if staircase else epoch + batch / STEPS)
    expected[3] = expected[2, -1]  # after end_epoch the last rate stays
    # The rates are differences of float32 weights near 1: absolute error ~1e-7.
    np.testing.assert_allclose(rates, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([entry["lr"] for entry in logs], expected[:, -1], rtol=1e-6)


def test_learning_rate_warmup():
    hvd_api, keras = api_modules(TF_KERAS)
    n = hvd.size()
    warmup = hvd_api.callbacks.LearningRateWarmupCallback(initial_lr=0.2, warmup_epochs=2)
    rates, _ = lr_probe(keras, hvd_api.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.2)), [warmup])
    # Goyal et al.: lr = initial/size * (progress * (size - 1) / warmup + 1), progress counted at
    # the batch's end, so that the warmup's last batch runs at the full rate.
    progress = np.arange(1, 2 * STEPS + 1) / STEPS
    expected = np.concatenate([0.2 / n * (progress * (n - 1) / 2 + 1), np.full(STEPS, 0.2)])
    np.testing.assert_allclose(rates.ravel(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(keras_generation() >= 3, reason="Keras 3 has no optimizer whose momentum is a variable")
def test_momentum_correction_with_a_legacy_optimizer():
    optimizer = tf.keras.optimizers.legacy.SGD(learning_rate=0.1, momentum=0.9)
    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=lambda e: 0.5 ** e)
    during = Recorder()
    during.on_batch_begin = lambda batch, logs=None: during.batches.append(
        float(during.model.optimizer.momentum.numpy()))
    after = Recorder(on_batch_end=lambda m: float(m.optimizer.momentum.numpy()))
    lr_probe(tf.keras, hvd.DistributedOptimizer(optimizer), [schedule, during, after], epochs=2, steps=2)
    # The first batch of epoch 1 halves the rate: its step runs with the momentum halved too.
    np.testing.assert_allclose(during.batches, [0.9, 0.9, 0.45, 0.9], rtol=1e-6)
    np.testing.assert_allclose(after.batches, [0.9] * 4, rtol=1e-6)


def test_momentum_correction_warns_where_momentum_is_a_number():
    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lr_probe(tf.keras, hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)),
                 [schedule], epochs=2, steps=1)
    assert any("momentum correction is skipped" in str(w.message) for w in caught)


def test_best_model_checkpoint_keeps_the_best_epoch(tmp_path):
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(-1, 1)
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    # A rate past the stability limit (2 / (2 mean(x^2)) = 2.3): every step overshoots further,
    # so the best epoch is the first and the last is the worst.
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=3.0), loss="mse")
    checkpoint = hvd.callbacks.BestModelCheckpoint(monitor="val_loss", save_weights_only=True)
    with pytest.raises(ValueError, match="filepath"):
        model.fit(x, 3 * x, epochs=1, verbose=0, callbacks=[checkpoint], validation_data=(x, 3 * x))
    checkpoint.filepath = str(tmp_path / f"best-{hvd.rank()}.weights.h5")
    weights = Recorder(on_epoch_end=lambda logs: (logs["val_loss"], model.get_weights()))
    model.fit(x, 3 * x, batch_size=16, epochs=6, verbose=0, callbacks=[weights, checkpoint], validation_data=(x, 3 * x))
    best_loss, best_weights = min(weights.epochs, key=lambda entry: entry[0])
    model.load_weights(checkpoint.filepath)
    assert os.path.exists(checkpoint.filepath)
    assert_all_close(model.get_weights(), best_weights, rtol=1e-6)
    assert best_loss < weights.epochs[-1][0]
