"""Training with hora.tensorflow against numpy: the distributed tapes and the TF1 optimizer
average the ranks' gradients, SyncBatchNormalization normalizes with the global batch's
statistics, process sets reduce over their members, and the elastic states save, restore and
sync."""

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow as hvd
from conftest import per_rank, run


def linear_data(r):
    """Rank r's batch for the loss sum((x @ w - y)^2)."""
    return per_rank(r, (5, 3), np.float32, 40), per_rank(r, (5, 2), np.float32, 41)


def linear_grad(w, r):
    x, y = linear_data(r)
    return 2 * x.T @ (x @ w - y)


W0 = np.arange(6, dtype=np.float32).reshape(3, 2) / 10


@pytest.mark.parametrize("options", [{}, {"groups": 1}, {"compression": hvd.Compression.fp16},
                                     {"op": hvd.Sum}, {"gradient_predivide_factor": 2.0}])
def test_distributed_gradient_tape_averages(options, mode):
    w = tf.Variable(W0)
    b = tf.Variable(tf.zeros([2]))
    x, y = (tf.constant(a) for a in linear_data(hvd.rank()))

    def fn():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(x @ w + b - y))
        return hvd.DistributedGradientTape(tape, **options).gradient(loss, [w, b])

    gw, gb = run(mode, fn)
    grads = [linear_grad(W0, r) for r in range(hvd.size())]
    want = np.sum(grads, axis=0) if options.get("op") == hvd.Sum else np.mean(grads, axis=0)
    tol = 2e-2 if "compression" in options else 1e-4
    np.testing.assert_allclose(gw, want, rtol=tol, atol=tol)
    residuals = [2 * (linear_data(r)[0] @ W0 - linear_data(r)[1]).sum(axis=0) for r in range(hvd.size())]
    want_b = np.sum(residuals, axis=0) if options.get("op") == hvd.Sum else np.mean(residuals, axis=0)
    np.testing.assert_allclose(gb, want_b, rtol=tol, atol=tol)


def test_sparse_gradients_with_and_without_dense(mode):
    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    ids = tf.constant([hvd.rank() % 6, (hvd.rank() + 2) % 6])

    def fn(sparse_as_dense):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, ids))
        grad = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(loss, [table])[0]
        return tf.convert_to_tensor(grad)

    want = np.zeros((6, 2), np.float32)
    for r in range(hvd.size()):
        for i in (r % 6, (r + 2) % 6):
            want[i] += 1.0 / hvd.size()
    np.testing.assert_allclose(run(mode, lambda: fn(False)), want, rtol=1e-6)
    np.testing.assert_allclose(run(mode, lambda: fn(True)), want, rtol=1e-6)


def test_partial_tape_keeps_local_layers_local():
    shared = tf.keras.layers.Dense(2, use_bias=False, kernel_initializer=tf.constant_initializer(W0))
    local = tf.keras.layers.Dense(2, use_bias=False, kernel_initializer=tf.constant_initializer(np.eye(2)))
    x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(local(shared(x)) - y))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, [shared.kernel, local.kernel])
    np.testing.assert_allclose(g_shared, np.mean([linear_grad(W0, r) for r in range(hvd.size())], axis=0),
                               rtol=1e-4, atol=1e-4)
    mine_x, mine_y = linear_data(hvd.rank())
    hidden = mine_x @ W0
    np.testing.assert_allclose(g_local, 2 * hidden.T @ (hidden - mine_y) / hvd.size(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError):
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=["not a layer"])


def test_tf1_distributed_optimizer_averages_before_applying():
    w = tf.Variable(W0)
    x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    grads_and_vars = opt.compute_gradients(lambda: tf.reduce_sum(tf.square(x @ w - y)), var_list=[w])
    opt.apply_gradients(grads_and_vars)
    want = W0 - 0.1 * np.mean([linear_grad(W0, r) for r in range(hvd.size())], axis=0)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


@pytest.mark.parametrize("average", [False, True])
def test_tf1_backward_passes_per_step_sum_locally_then_average_in_a_graph(average):
    """Two session runs of one train op: the first only sums this rank's gradient and counts the
    global step, the second averages the two passes' sums across ranks and applies them."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(W0))
        step = tf.compat.v1.train.get_or_create_global_step()
        x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), backward_passes_per_step=2,
                                       average_aggregated_gradients=average)
        train = opt.minimize(tf.reduce_sum(tf.square(tf.matmul(x, w) - y)), global_step=step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train)
            np.testing.assert_allclose(session.run(w), W0)
            assert session.run(step) == 1
            session.run(train)
            passes = 1 if average else 2
            want = W0 - 0.1 * passes * np.mean([linear_grad(W0, r) for r in range(hvd.size())], axis=0)
            np.testing.assert_allclose(session.run(w), want, rtol=1e-4, atol=1e-5)
            assert session.run(step) == 2
            session.run(train)  # the sums start again from zero
            np.testing.assert_allclose(session.run(w), want, rtol=1e-4, atol=1e-5)


def test_tf1_backward_passes_per_step_eagerly():
    w = tf.Variable(W0)
    x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), backward_passes_per_step=2)
    for _ in range(2):
        opt.apply_gradients(opt.compute_gradients(lambda: tf.reduce_sum(tf.square(x @ w - y)), var_list=[w]))
    want = W0 - 0.1 * 2 * np.mean([linear_grad(W0, r) for r in range(hvd.size())], axis=0)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-5)


def adasum_numpy(per_rank_arrays):
    """Adasum's tree over the ranks, in float64: pairs combine as
    (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (see tests/python/distributed/test_adasum.py)."""
    level = [np.asarray(x, np.float64).ravel() for x in per_rank_arrays]
    while len(level) > 1:
        pairs = []
        for a, b in zip(level[::2], level[1::2]):
            dot = a @ b
            pairs.append((1 - dot / (2 * (a @ a))) * a + (1 - dot / (2 * (b @ b))) * b)
        level = pairs
    return level[0].reshape(np.shape(per_rank_arrays[0]))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("passes", [1, 2])
def test_tf1_adasum_optimizer_combines_the_local_updates(graph, passes):
    """op=Adasum with a TF1 optimizer: each rank takes `passes` local SGD steps, then the
    variable becomes its start plus the Adasum of the ranks' deltas."""
    n = hvd.size()
    if n & (n - 1):
        pytest.skip("Adasum needs a power-of-two number of ranks")
    lr = 0.05
    deltas = []
    for r in range(n):
        w = W0.astype(np.float64)
        for _ in range(passes):
            w = w - lr * linear_grad(w.astype(np.float32), r)
        deltas.append(w - W0)
    want = W0 + adasum_numpy(deltas)

    def train_op(w, opt):
        x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
        return opt.minimize(lambda: tf.reduce_sum(tf.square(tf.matmul(x, w) - y)), var_list=[w])

    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr), op=hvd.Adasum,
                                   backward_passes_per_step=passes)
    if graph:
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=tf.constant(W0))
            x, y = (tf.constant(a) for a in linear_data(hvd.rank()))
            train = opt.minimize(tf.reduce_sum(tf.square(tf.matmul(x, w) - y)))
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                for _ in range(passes):
                    session.run(train)
                got = session.run(w)
    else:
        w = tf.Variable(W0)
        for _ in range(passes):
            train_op(w, opt)
        got = w.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sync_batch_normalization_uses_the_global_batch(mode):
    layer = hvd.SyncBatchNormalization(epsilon=1e-3, momentum=0.5)
    inputs = [per_rank(r, (4, 3), np.float32, 42) for r in range(hvd.size())]
    out = run(mode, lambda x: layer(x, training=True), tf.constant(inputs[hvd.rank()]))
    everything = np.concatenate(inputs)
    mean, var = everything.mean(axis=0), everything.var(axis=0)
    np.testing.assert_allclose(out, (inputs[hvd.rank()] - mean) / np.sqrt(var + 1e-3), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError):
        hvd.SyncBatchNormalization(fused=True)


def test_process_sets_reduce_over_their_members(mode):
    if hvd.size() < 2:
        pytest.skip("a process set of some ranks needs two")
    members = [0, 1] if hvd.size() > 2 else [1]  # the set of every rank exists already
    subset = hvd.add_process_set(members)
    # Horovod's internal view of the sets, which code written for it reads.
    assert hvd.mpi_ops._basics._get_process_set_ids_and_ranks() == {0: list(range(hvd.size())),
                                                                   subset.process_set_id: members}
    try:
        x = tf.constant([float(hvd.rank() + 1)] * 2)
        if subset.included():
            out = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=subset), x)
            np.testing.assert_allclose(out, [sum(r + 1.0 for r in members)] * 2)
            root_value = run(mode, lambda t: hvd.broadcast(t, members[-1], process_set=subset), x)
            np.testing.assert_allclose(root_value, [members[-1] + 1.0] * 2)
            gathered = run(mode, lambda t: hvd.allgather(t, process_set=subset), x)
            np.testing.assert_allclose(gathered, np.repeat([r + 1.0 for r in members], 2))
            assert run(mode, lambda: hvd.size_op(subset.process_set_id)) == len(members)
        assert run(mode, lambda: hvd.process_set_included_op(subset.process_set_id)) == int(subset.included())
    finally:
        assert hvd.remove_process_set(subset)
    # A removed set, or an id set by hand, is refused before any op is made, as Horovod does.
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.ones(2), process_set=subset)
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10
    for reduce in (lambda: hvd.allreduce(tf.ones(2), process_set=fake),
                   lambda: hvd.grouped_allreduce([tf.ones(2)], process_set=fake), fake.size):
        with pytest.raises(ValueError, match="process set 10 is not known"):
            reduce()


def test_elastic_states_commit_restore_and_sync():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
    model.build((None, 3))
    opt = tf.keras.optimizers.SGD(0.1)
    for var in model.variables:
        var.assign(tf.fill(var.shape, float(hvd.rank() + 1)))
    state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=hvd.rank())
    state.sync()  # rank 0's weights and epoch everywhere
    assert state.epoch == 0
    np.testing.assert_allclose(model.variables[0].numpy(), np.ones((3, 2)))
    state.epoch = 5
    model.variables[0].assign(tf.zeros((3, 2)))
    state.restore()  # back to the last commit (the sync)
    assert state.epoch == 0
    np.testing.assert_allclose(model.variables[0].numpy(), np.ones((3, 2)))
    state.epoch = 7
    state.commit()
    state.epoch = 8
    state.restore()
    assert state.epoch == 7
    objects = hvd.elastic.ObjectState(batch=hvd.rank() * 10)
    objects.sync()
    assert objects.batch == 0
    with pytest.raises(ValueError):
        hvd.elastic.TensorFlowKerasState(tf.keras.Sequential([tf.keras.layers.Dense(1)]))


def test_elastic_run_turns_lost_process_errors_into_hora_errors():
    calls = []

    class Once(hvd.elastic.ObjectState):
        def restore(self):
            calls.append("restore")
            super().restore()

    @hvd.elastic.run
    def train(state):
        calls.append("train")
        if len(calls) == 1:
            raise tf.errors.UnknownError(None, None, "peer lost")
        return "done"

    assert train(Once(step=0)) == "done"
    assert calls == ["train", "restore", "train"]


def test_broadcast_global_variables_is_tf1_only():
    with pytest.raises(RuntimeError):
        hvd.broadcast_global_variables(0)


def test_the_readme_recipe_trains_every_rank_alike():
    """README's quick start: a tape in a tf.function, variables broadcast after the first step;
    the ranks start from different weights and end with the same ones."""
    tf.random.set_seed(hvd.rank())
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
    loss_fn = tf.keras.losses.MeanSquaredError()
    opt = tf.keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9)

    @tf.function
    def step(x, y, first):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    for i in range(5):
        x = per_rank(hvd.rank(), (16, 4), np.float32, 50 + i)
        step(tf.constant(x), tf.constant(x.sum(axis=1, keepdims=True)), i == 0)
    weights = tf.concat([tf.reshape(v, [-1]) for v in model.variables], axis=0)
    np.testing.assert_array_equal(hvd.allreduce(weights, op=hvd.Min).numpy(), hvd.allreduce(weights, op=hvd.Max).numpy())


def test_tf1_graph_and_session():
    """TF1 code: the ops in a tf.Graph run by a Session; the hook broadcasts the global
    variables, broadcast_object_fn objects."""
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([float(hvd.rank() + 1)] * 3))
        hook = hvd.BroadcastGlobalVariablesHook(0)
        hook.begin()
        total = hvd.allreduce(v.read_value(), op=hvd.Sum)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            hook.after_create_session(session, None)
            np.testing.assert_allclose(session.run(v), [1.0] * 3)
            np.testing.assert_allclose(session.run(total), [float(hvd.size())] * 3)
            bcast = hvd.broadcast_object_fn(root_rank=0, session=session)
            assert bcast({"rank": hvd.rank()}) == {"rank": 0}
            assert hvd.broadcast_object([hvd.rank()], session=session, name="graph.obj") == [0]
