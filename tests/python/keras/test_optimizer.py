"""DistributedOptimizer in model.fit: each rank trains on its slice of every global batch, and the
weights after the steps must equal those of one process (plain Keras, no hora) trained on the
whole global batches; with op=Sum, backward_passes_per_step, fp16 compression, groups, sparse
gradients and process sets, the reference changes accordingly."""

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow.keras as hvd
from keras_helpers import (KERAS, OUT, TF_KERAS, api_modules, assert_all_close, fit, gathered, global_data,
                           keras_generation, mlp, rank_share)

STEPS, BATCH = 3, 4


def sgd(keras, lr=0.1, momentum=0.0):
    return keras.optimizers.SGD(learning_rate=lr, momentum=momentum)


def reference(keras, optimizer, x, y, batch, steps=STEPS):
    """One process, plain Keras, the global batches."""
    model = mlp(keras)
    model.compile(optimizer=optimizer, loss="mse")
    return fit(model, x[:steps * batch], y[:steps * batch], batch).get_weights()


def distributed(keras, optimizer, x, y, batch=BATCH, steps=STEPS, run_eagerly=False):
    model = mlp(keras)
    model.compile(optimizer=optimizer, loss="mse", run_eagerly=run_eagerly)
    fit(model, rank_share(x, steps, batch), rank_share(y, steps, batch), batch)
    return model


SGD_MOMENTUM = lambda k: sgd(k, 0.1, momentum=0.9)  # noqa: E731
ADAM = lambda k: k.optimizers.Adam(learning_rate=0.01)  # noqa: E731


# Traced (tf.function, as fit runs by default) and eager (run_eagerly).
@pytest.mark.parametrize("names,make_optimizer,run_eagerly", [
    pytest.param(TF_KERAS, SGD_MOMENTUM, False, id="SGD-momentum"),
    pytest.param(TF_KERAS, ADAM, False, id="Adam"),
    pytest.param(TF_KERAS, SGD_MOMENTUM, True, id="SGD-momentum-eager"),
    pytest.param(TF_KERAS, ADAM, True, id="Adam-eager"),
    pytest.param(KERAS, SGD_MOMENTUM, False, id="hora.keras-SGD-momentum"),
])
def test_steps_equal_one_process_on_the_global_batches(names, make_optimizer, run_eagerly):
    hvd_api, keras = api_modules(names)
    x, y = global_data(STEPS, BATCH)
    model = distributed(keras, hvd_api.DistributedOptimizer(make_optimizer(keras)), x, y, run_eagerly=run_eagerly)
    everyone = gathered(model.get_weights())
    expected = reference(keras, make_optimizer(keras), x, y, hvd.size() * BATCH)
    for weights in everyone:
        assert_all_close(weights, expected, rtol=1e-5, atol=1e-6)
    assert int(model.optimizer.iterations.numpy()) == STEPS


def test_the_wrapped_class_is_a_same_named_subclass_made_from_the_config():
    original = tf.keras.optimizers.SGD(learning_rate=0.25, momentum=0.5, nesterov=True)
    opt = hvd.DistributedOptimizer(original)
    assert isinstance(opt, tf.keras.optimizers.SGD) and type(opt) is not type(original)
    assert type(opt).__name__ == "SGD" and type(opt).__module__ == type(original).__module__
    assert type(opt).__bases__[-1] is type(original)
    assert opt.get_config() == original.get_config()
    assert callable(opt.variables) and opt.variables() == list(opt.variables)
    with pytest.raises(ValueError, match="op currently only supports Average and Sum"):
        hvd.DistributedOptimizer(original, op="Max")


def test_op_sum_adds_the_gradients():
    x, y = global_data(STEPS, BATCH)
    model = distributed(tf.keras, hvd.DistributedOptimizer(sgd(tf.keras, 0.05), op=hvd.Sum), x, y)
    # The sum over ranks of per-rank mean gradients is size x the global mean gradient.
    expected = reference(tf.keras, sgd(tf.keras, 0.05 * hvd.size()), x, y, hvd.size() * BATCH)
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options,tolerance", [
    ({"gradient_predivide_factor": 2.0}, 1e-5),
    ({"compression": hvd.Compression.fp16}, 2e-3),
    ({"groups": 1}, 1e-5),
    ({"sparse_as_dense": True}, 1e-5),
], ids=["predivide", "fp16", "one-group"] + ["sparse_as_dense"])
def test_options_that_keep_the_average(options, tolerance):
    x, y = global_data(STEPS, BATCH)
    model = distributed(tf.keras, hvd.DistributedOptimizer(sgd(tf.keras, 0.1, 0.9), **options), x, y)
    expected = reference(tf.keras, sgd(tf.keras, 0.1, 0.9), x, y, hvd.size() * BATCH)
    assert_all_close(model.get_weights(), expected, rtol=tolerance, atol=tolerance)


def test_groups_of_variables():
    x, y = global_data(STEPS, BATCH)
    model = mlp(tf.keras)
    first = model.layers[0].trainable_weights
    model.compile(optimizer=hvd.DistributedOptimizer(sgd(tf.keras, 0.1), groups=[first]), loss="mse")
    fit(model, rank_share(x, STEPS, BATCH), rank_share(y, STEPS, BATCH), BATCH)
    expected = reference(tf.keras, sgd(tf.keras, 0.1), x, y, hvd.size() * BATCH)
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "summed"])
def test_backward_passes_per_step(average):
    """Two local batches are summed (or averaged) before one allreduce and one update: rank r's
    passes 2s and 2s+1 hold its slices of global batches 2s and 2s+1, so with averaging the
    update is one step on those two global batches together (summed: at twice the rate)."""
    x, y = global_data(2 * STEPS, BATCH)
    opt = hvd.DistributedOptimizer(sgd(tf.keras, 0.1), backward_passes_per_step=2,
                                   average_aggregated_gradients=average)
    model = distributed(tf.keras, opt, x, y, steps=2 * STEPS)
    lr = 0.1 if average else 0.2
    expected = reference(tf.keras, sgd(tf.keras, lr), x, y, 2 * hvd.size() * BATCH)
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)
    assert int(model.optimizer.iterations.numpy()) == 2 * STEPS


def test_aggregation_counter_under_horovods_name():
    """Code written for Horovod reads the passes since the last reduction as
    opt._agg_helper.counter; without aggregation there is no helper."""
    x, y = global_data(3, BATCH)
    opt = hvd.DistributedOptimizer(sgd(tf.keras), backward_passes_per_step=2)
    model = mlp(tf.keras)
    model.compile(optimizer=opt, loss="mse")
    for step in range(3):
        model.train_on_batch(rank_share(x, 3, BATCH)[step * BATCH:(step + 1) * BATCH],
                             rank_share(y, 3, BATCH)[step * BATCH:(step + 1) * BATCH])
    assert int(opt._agg_helper.counter.numpy()) == 3 % 2
    assert hvd.DistributedOptimizer(sgd(tf.keras))._agg_helper is None


@pytest.mark.skipif(keras_generation() != 2, reason="Keras 2's gradient-computing methods")
def test_compute_gradients_under_either_name_are_averaged():
    """Horovod's DistributedOptimizer has _compute_gradients on every Keras 2 optimizer, and code
    written for it calls that on the 2.11+ optimizers too, whose own method is compute_gradients:
    both return the gradients averaged over the ranks."""
    w = tf.Variable([1.0, 2.0])
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    mean = np.mean([r + 1.0 for r in range(hvd.size())])
    for method in ("compute_gradients", "_compute_gradients"):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(hvd.rank() + 1))
        [(grad, var)] = getattr(opt, method)(loss, [w], tape=tape)
        assert var is w
        np.testing.assert_allclose(grad.numpy(), [mean, mean])


@pytest.mark.parametrize("sparse_as_dense", [False, True], ids=["sparse", "dense"])
def test_embedding_gradients(sparse_as_dense):
    """An Embedding's gradient is IndexedSlices: reduced as such, or as a dense tensor."""
    rs = np.random.RandomState(7)
    tokens = rs.randint(0, 10, (STEPS * hvd.size() * BATCH, 2))
    targets = rs.randn(len(tokens), OUT).astype(np.float32)

    def model_with(optimizer):
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,), dtype="int32"), tf.keras.layers.Embedding(10, 4),
                                     tf.keras.layers.Flatten(), tf.keras.layers.Dense(OUT)])
        init = np.random.RandomState(0)
        model.set_weights([init.uniform(-1, 1, w.shape).astype(np.float32) for w in model.get_weights()])
        model.compile(optimizer=optimizer, loss="mse")
        return model

    model = model_with(hvd.DistributedOptimizer(sgd(tf.keras, 0.5), sparse_as_dense=sparse_as_dense))
    fit(model, rank_share(tokens, STEPS, BATCH), rank_share(targets, STEPS, BATCH), BATCH)
    expected = fit(model_with(sgd(tf.keras, 0.5)), tokens, targets, hvd.size() * BATCH).get_weights()
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


def test_a_process_set_of_one_rank_trains_alone():
    """Each rank reduces over a set that holds only itself: its weights are those of training
    on its own slices alone, and nothing waits for the other ranks."""
    if hvd.size() == 1:
        pytest.skip("a set of one rank is the global set in a job of one")
    sets = [hvd.add_process_set([r]) for r in range(hvd.size())]
    try:
        x, y = global_data(STEPS, BATCH)
        own_x, own_y = rank_share(x, STEPS, BATCH), rank_share(y, STEPS, BATCH)
        model = distributed(tf.keras, hvd.DistributedOptimizer(sgd(tf.keras, 0.1), process_set=sets[hvd.rank()]),
                            x, y)
        expected = reference(tf.keras, sgd(tf.keras, 0.1), own_x, own_y, BATCH)
    finally:
        for s in sets:
            hvd.remove_process_set(s)
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


def test_local_layers_keep_their_own_gradients():
    """PartialDistributedOptimizer: the last layer's gradient is not reduced but divided by the
    size (scale_local_gradients); the other layers' gradients are averaged."""
    import hora.keras
    x, y = global_data(1, BATCH)
    model = mlp(tf.keras)
    local = model.layers[-1]
    opt = hora.keras.PartialDistributedOptimizer(sgd(tf.keras, 0.1), local_layers=[local])
    model.compile(optimizer=opt, loss="mse")
    initial = model.get_weights()
    fit(model, rank_share(x, 1, BATCH), rank_share(y, 1, BATCH), BATCH)

    def gradients(xs, ys):
        probe = mlp(tf.keras)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(probe(xs) - ys))
        return [g.numpy() for g in tape.gradient(loss, probe.trainable_weights)]

    shared = gradients(x, y)  # the global batch: the average over ranks of their slices' means
    own = gradients(rank_share(x, 1, BATCH), rank_share(y, 1, BATCH))
    expected = [w - 0.1 * g for w, g in zip(initial[:2], shared[:2])]
    expected += [w - 0.1 * g / hvd.size() for w, g in zip(initial[2:], own[2:])]
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(keras_generation() >= 3, reason="Keras 3 has no legacy optimizers")
def test_legacy_keras2_optimizers():
    x, y = global_data(STEPS, BATCH)
    legacy = lambda: tf.keras.optimizers.legacy.SGD(learning_rate=0.1, momentum=0.9)  # noqa: E731
    model = distributed(tf.keras, hvd.DistributedOptimizer(legacy()), x, y)
    expected = reference(tf.keras, legacy(), x, y, hvd.size() * BATCH)
    assert_all_close(model.get_weights(), expected, rtol=1e-5, atol=1e-6)


def test_values_collectives():
    r, n = hvd.rank(), hvd.size()
    averaged = hvd.allreduce([float(r), 2.0 * r], name="keras.values.allreduce").numpy()
    summed = hvd.allreduce(float(r + 1), op=hvd.Sum, name="keras.values.sum").numpy()
    everyone = hvd.allgather([[r] * 2] * (r + 1), name="keras.values.allgather").numpy()
    root = hvd.broadcast([r + 10] * 3, root_rank=n - 1, name="keras.values.broadcast").numpy()
    scattered = hvd.reducescatter(np.arange(2.0 * n) + r, op=hvd.Sum, name="keras.values.reducescatter").numpy()
    np.testing.assert_allclose(averaged, [np.mean(range(n)), 2 * np.mean(range(n))])
    assert summed == n * (n + 1) / 2
    np.testing.assert_array_equal(everyone, [[q, q] for q in range(n) for _ in range(q + 1)])
    np.testing.assert_array_equal(root, [n - 1 + 10] * 3)
    total = n * np.arange(2.0 * n) + sum(range(n))
    np.testing.assert_allclose(scattered, total[2 * r:2 * r + 2])


def test_the_tutorials_help_lookups_have_docstrings():
    """The tutorial shows its readers ?hvd.rank, ?hvd.local_rank, ?hvd.size,
    ?hvd.DistributedOptimizer and ?hvd.callbacks.<the two callbacks>."""
    for thing in (hvd.rank, hvd.local_rank, hvd.size, hvd.DistributedOptimizer,
                  hvd.callbacks.BroadcastGlobalVariablesCallback, hvd.callbacks.MetricAverageCallback):
        assert thing.__doc__ and len(thing.__doc__.strip()) > 20, thing
