"""Every collective of hora.tensorflow, eagerly and inside tf.function, against numpy references
computed from every rank's inputs."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow as hvd
from conftest import all_inputs, per_rank, run

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.uint8, np.int8, np.int16, np.int32, np.int64]


def reference(inputs, op):
    wide = [x.astype(np.float64) for x in inputs]
    reduce = {hvd.Sum: np.add, hvd.Average: np.add, hvd.Min: np.minimum, hvd.Max: np.maximum,
              hvd.Product: np.multiply}[op]
    out = functools.reduce(reduce, wide)
    return out / len(wide) if op == hvd.Average else out


def close(got, want, dtype=np.float32):
    tol = 1e-2 if np.dtype(dtype) == np.float16 else 1e-5
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_every_type_and_op(dtype, op, mode):
    if op == hvd.Average and np.dtype(dtype).kind != "f":
        pytest.skip("Average of integers truncates")
    if op == hvd.Product and dtype == np.float16:
        pytest.skip("products overflow float16")
    inputs = all_inputs((3, 5), dtype)
    out = run(mode, lambda x: hvd.allreduce(x, op=op, name=f"ar.{np.dtype(dtype).name}.{op}"),
              tf.constant(inputs[hvd.rank()]))
    assert out.dtype == dtype and out.shape == (3, 5)
    want = reference(inputs, op)
    if np.dtype(dtype).kind != "f":
        want = want.astype(dtype)  # integer sums wrap as the type does
    close(out, want, dtype)


def test_allreduce_scales_compression_and_defaults(mode):
    inputs = all_inputs((4, 3), np.float32, seed=1)
    x = tf.constant(inputs[hvd.rank()])
    total = reference(inputs, hvd.Sum)

    def fn(x):
        return (hvd.allreduce(x),  # Average by default
                hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
                hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16),
                hvd.allreduce(tf.Variable(x) if mode == "eager" else x, average=False))

    with pytest.warns(DeprecationWarning):
        average, scaled, fp16, deprecated = run(mode, fn, x)
    close(average, total / hvd.size())
    close(scaled, total * 0.5)
    assert fp16.dtype == np.float32
    np.testing.assert_allclose(fp16, total, rtol=1e-2, atol=1e-2)
    close(deprecated, total)


def test_allreduce_of_indexed_slices(mode):
    r, n = hvd.rank(), hvd.size()

    def fn():
        slices = tf.IndexedSlices(tf.constant([[float(r + 1)] * 2]), tf.constant([r]), tf.constant([n, 2]))
        out = hvd.allreduce(slices, op=hvd.Average)
        return out.values, out.indices

    values, indices = run(mode, fn)
    np.testing.assert_array_equal(indices, np.arange(n))
    close(values, [[(i + 1) / n] * 2 for i in range(n)])
    with pytest.raises(NotImplementedError):
        hvd.allreduce(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])), op=hvd.Max)


def test_grouped_allreduce_with_indexed_slices(mode):
    inputs = [all_inputs((5,), np.float64, seed=s) for s in (2, 3)]

    def fn():
        dense = [tf.constant(x[hvd.rank()]) for x in inputs]
        slices = tf.IndexedSlices(tf.ones([1, 3], tf.float64), tf.constant([hvd.rank()]))
        outs = hvd.grouped_allreduce(dense + [slices], op=hvd.Sum)
        return outs[0], outs[1], outs[2].values

    a, b, values = run(mode, fn)
    close(a, reference(inputs[0], hvd.Sum))
    close(b, reference(inputs[1], hvd.Sum))
    close(values, np.ones([hvd.size(), 3]))
    assert hvd.grouped_allreduce([]) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_])
def test_allgather_first_dimensions_differ(dtype, mode):
    inputs = [per_rank(r, (r + 1, 2, 3), dtype, seed=4) for r in range(hvd.size())]
    out = run(mode, lambda x: hvd.allgather(x), tf.constant(inputs[hvd.rank()]))
    np.testing.assert_array_equal(out, np.concatenate(inputs))


def test_allgather_static_shape_and_grouped(mode):
    x = tf.constant(per_rank(hvd.rank(), (2, 4), np.float32, seed=5))
    assert tf.function(lambda t: hvd.allgather(t)).get_concrete_function(x).output_shapes.as_list() == [None, 4]
    ints = [per_rank(r, (r + 2,), np.int32, seed=6) for r in range(hvd.size())]
    floats = [per_rank(r, (1, 3), np.float32, seed=7) for r in range(hvd.size())]

    def fn(a, b):
        return hvd.grouped_allgather([a, b * 2]), hvd.grouped_allgather([a])

    (a, b), (again,) = run(mode, fn, tf.constant(floats[hvd.rank()]), tf.constant(floats[hvd.rank()]))
    np.testing.assert_array_equal(a, np.concatenate(floats))
    np.testing.assert_array_equal(b, np.concatenate(floats) * 2)
    np.testing.assert_array_equal(again, np.concatenate(floats))
    out = run(mode, lambda t: hvd.grouped_allgather([t])[0], tf.constant(ints[hvd.rank()]))
    np.testing.assert_array_equal(out, np.concatenate(ints))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_broadcast_from_every_root(dtype, mode):
    for root in range(hvd.size()):
        inputs = all_inputs((3, 2), dtype, seed=8 + root)
        out = run(mode, lambda x: hvd.broadcast(x, root, name=f"bcast.{root}"), tf.constant(inputs[hvd.rank()]))
        np.testing.assert_array_equal(out, inputs[root])


def test_broadcast_in_place_and_variables():
    value = per_rank(hvd.rank(), (4,), np.float32, seed=9)
    root_value = per_rank(0, (4,), np.float32, seed=9)
    a, b = tf.Variable(value), tf.Variable(value * 2)
    hvd.broadcast_variables([a, b], root_rank=0)
    np.testing.assert_array_equal(a.numpy(), root_value)
    np.testing.assert_array_equal(b.numpy(), root_value * 2)
    c = tf.Variable(value + 1)
    hvd.broadcast_variables([c], root_rank=0, inplace=True)
    np.testing.assert_array_equal(c.numpy(), root_value + 1)
    d = tf.Variable(value - 1)
    returned = hvd.broadcast_([d], root_rank=0)
    np.testing.assert_array_equal(d.numpy(), root_value - 1)
    np.testing.assert_array_equal(returned[0].numpy(), root_value - 1)


def test_broadcast_object_and_allgather_object():
    obj = {"rank": hvd.rank(), "payload": list(range(hvd.rank() * 100))}
    assert hvd.broadcast_object(obj, root_rank=0) == {"rank": 0, "payload": []}
    if hvd.size() > 1:
        assert hvd.broadcast_object(obj, root_rank=1, name="from1")["rank"] == 1
    gathered = hvd.allgather_object(obj)
    assert gathered == [{"rank": r, "payload": list(range(r * 100))} for r in range(hvd.size())]


def _alltoall_reference(rows_to, dtype, seed):
    """What this rank receives when rank s sends rows_to(s)[d] rows to rank d."""
    n, me = hvd.size(), hvd.rank()
    received, counts = [], []
    for s in range(n):
        splits = rows_to(s)
        x = per_rank(s, (sum(splits) + 1, 2), dtype, seed)  # one extra row, not sent
        start = sum(splits[:me])
        received.append(x[start:start + splits[me]])
        counts.append(splits[me])
    return np.concatenate(received), np.array(counts, np.int32)


def test_alltoall_with_splits(mode):
    n, me = hvd.size(), hvd.rank()

    def rows_to(s):
        return [(s + d) % 3 for d in range(n)]

    x = per_rank(me, (sum(rows_to(me)) + 1, 2), np.float32, seed=10)
    out, received = run(mode, lambda t, s: hvd.alltoall(t, splits=s), tf.constant(x),
                        tf.constant(rows_to(me), tf.int32))
    want, counts = _alltoall_reference(rows_to, np.float32, 10)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(received, counts)


def test_alltoall_even_split(mode):
    n = hvd.size()
    inputs = [per_rank(r, (2 * n, 3), np.int64, seed=11) for r in range(n)]
    out = run(mode, lambda t: hvd.alltoall(t), tf.constant(inputs[hvd.rank()]))
    me = hvd.rank()
    np.testing.assert_array_equal(out, np.concatenate([x[2 * me:2 * me + 2] for x in inputs]))


@pytest.mark.parametrize("collective", ["allgather", "broadcast", "alltoall"])
def test_uint16_is_moved_bit_for_bit(collective, mode):
    """Horovod's data-moving ops take uint16 (its own suite moves it); values above int16's
    range come back unchanged."""
    n, me = hvd.size(), hvd.rank()
    inputs = [(65535 - 1000 * r - np.arange(6 * n)).astype(np.uint16).reshape(2 * n, 3) for r in range(n)]
    fn, want = {
        "allgather": (hvd.allgather, np.concatenate(inputs)),
        "broadcast": (lambda t: hvd.broadcast(t, n - 1, name="u16.bcast"), inputs[n - 1]),
        "alltoall": (hvd.alltoall, np.concatenate([x[2 * me:2 * me + 2] for x in inputs])),
    }[collective]
    out = run(mode, fn, tf.constant(inputs[me]))
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, want)


def _block(rows, n, r):
    """Rank r's rows of a reducescatter of `rows` rows: the first ranks take one more."""
    base, extra = divmod(rows, n)
    start = r * base + min(r, extra)
    return start, start + base + (1 if r < extra else 0)


@pytest.mark.parametrize("rows", [6, 7])
def test_reducescatter(rows, mode):
    inputs = all_inputs((rows, 2), np.float32, seed=12)
    start, end = _block(rows, hvd.size(), hvd.rank())

    def fn(x):
        return hvd.reducescatter(x), hvd.reducescatter(x, op=hvd.Sum, name="rs.sum")

    average, total = run(mode, fn, tf.constant(inputs[hvd.rank()]))
    close(total, reference(inputs, hvd.Sum)[start:end])
    close(average, reference(inputs, hvd.Average)[start:end])


def test_grouped_reducescatter(mode):
    a = all_inputs((5, 3), np.float64, seed=13)
    b = all_inputs((4,), np.float64, seed=14)

    def fn(x, y):
        return hvd.grouped_reducescatter([x, y], op=hvd.Sum)

    out_a, out_b = run(mode, fn, tf.constant(a[hvd.rank()]), tf.constant(b[hvd.rank()]))
    sa, ea = _block(5, hvd.size(), hvd.rank())
    sb, eb = _block(4, hvd.size(), hvd.rank())
    close(out_a, reference(a, hvd.Sum)[sa:ea])
    close(out_b, reference(b, hvd.Sum)[sb:eb])
    assert hvd.grouped_reducescatter([]) == []


def test_topology_ops(mode):
    def fn():
        return (hvd.size_op(), hvd.rank_op(), hvd.local_size_op(), hvd.local_rank_op(),
                hvd.process_set_included_op(0), hvd.process_set_included_op(12345))

    size, rank, local_size, local_rank, included, unknown = run(mode, fn)
    assert (size, rank, local_size, local_rank) == (hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank())
    assert (included, unknown) == (1, -2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="unknown process set 12345"):
        hvd.size_op(12345)


def test_join_returns_the_last_rank(mode):
    assert 0 <= run(mode, hvd.join) < hvd.size()


def test_allreduces_of_one_function_are_fused():
    """The collectives of a tf.function run concurrently (no control chain between them), so
    the engine gets them together and reduces them as one buffer."""
    from hora import _core

    @tf.function
    def step(x):
        return [hvd.allreduce(x * i, op=hvd.Sum, name=f"fused.{i}") for i in range(8)]

    x = tf.ones([4])
    graph = step.get_concrete_function(x).graph
    assert [len(op.control_inputs) for op in graph.get_operations() if op.type == "HoraAllreduce"] == [0] * 8
    out = step(x)
    np.testing.assert_allclose([o.numpy() for o in out], [[hvd.size() * i] * 4 for i in range(8)])
    if hvd.size() == 1:
        return
    # How many of a step's 8 tensors reach one engine cycle depends on the scheduler, so the
    # ranks step until all have seen 5 fused collectives, or give up after 100 steps.
    before = _core.engine_stats()["fused_allreduces"]
    for steps in range(1, 101):
        step(x)
        fused = _core.engine_stats()["fused_allreduces"] - before
        if hvd.allreduce(tf.constant(fused), op=hvd.Min, name="fused.seen").numpy() >= 5:
            break
    assert fused >= 5, f"{fused} fused collectives in {steps} steps of 8 concurrent allreduces"


def test_bfloat16_reductions_and_gathers(mode):
    inputs = all_inputs((4, 3), np.float32, seed=15)

    def fn(x):
        x = tf.cast(x, tf.bfloat16)
        return (tf.cast(hvd.allreduce(x, op=hvd.Sum), tf.float32), tf.cast(hvd.allgather(x), tf.float32),
                tf.cast(hvd.broadcast(x, 0), tf.float32))

    total, gathered, root = run(mode, fn, tf.constant(inputs[hvd.rank()]))
    rounded = [tf.cast(tf.cast(x, tf.bfloat16), tf.float32).numpy() for x in inputs]
    np.testing.assert_allclose(total, np.sum(rounded, axis=0), rtol=2e-2, atol=5e-2)
    np.testing.assert_array_equal(gathered, np.concatenate(rounded))
    np.testing.assert_array_equal(root, rounded[0])
