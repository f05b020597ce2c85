"""The gradients Horovod registers for its ops, through hora's ops, eagerly and in tf.function,
against numpy: d(sum(w * out))/dx for a per-rank weight w, so that every rank's gradient differs."""

import numpy as np
import pytest
import tensorflow as tf

import hora.tensorflow as hvd
from conftest import per_rank, run


def weights(shape, seed):
    """Every rank's upstream gradient (the weights of the loss), recomputable anywhere."""
    return [per_rank(r, shape, np.float64, seed) for r in range(hvd.size())]


def gradient(mode, forward, x, w):
    """d(sum(w * forward(x)))/dx."""

    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(w * forward(x))
        return tape.gradient(loss, x)

    return run(mode, fn, tf.constant(x), tf.constant(w))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_allreduce_gradient(op, mode):
    ws = weights((3, 2), 20)
    x = per_rank(hvd.rank(), (3, 2), np.float64, 21)
    got = gradient(mode, lambda t: hvd.allreduce(t, op=op, prescale_factor=2.0, postscale_factor=0.5), x, ws[hvd.rank()])
    want = np.sum(ws, axis=0) * (1.0 if op == hvd.Sum else 1.0 / hvd.size())
    np.testing.assert_allclose(got, want)


def test_grouped_allreduce_gradient(mode):
    ws = weights((4,), 22)
    x = per_rank(hvd.rank(), (4,), np.float64, 23)

    def forward(t):
        a, b = hvd.grouped_allreduce([t, t * 3], op=hvd.Sum)
        return a + b

    np.testing.assert_allclose(gradient(mode, forward, x, ws[hvd.rank()]), 4 * np.sum(ws, axis=0))


def test_allgather_gradient(mode):
    n, me = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(n)]
    total = sum(rows)
    ws = weights((total, 2), 24)
    x = per_rank(me, (rows[me], 2), np.float64, 25)
    got = gradient(mode, hvd.allgather, x, ws[me][:total])
    start = sum(rows[:me])
    # Horovod's gradient: the Average of the ranks' upstream gradients, this rank's rows.
    np.testing.assert_allclose(got, np.mean(ws, axis=0)[start:start + rows[me]])


def test_broadcast_gradient(mode):
    ws = weights((3,), 26)
    x = per_rank(hvd.rank(), (3,), np.float64, 27)
    root = hvd.size() - 1
    got = gradient(mode, lambda t: hvd.broadcast(t, root), x, ws[hvd.rank()])
    want = np.mean(ws, axis=0) if hvd.rank() == root else np.zeros(3)
    np.testing.assert_allclose(got, want)


def test_alltoall_gradient(mode):
    n, me = hvd.size(), hvd.rank()

    def splits_of(s):
        return [(s + d) % 2 + 1 for d in range(n)]

    splits = splits_of(me)
    x = per_rank(me, (sum(splits) + 1, 2), np.float64, 28)  # the last row is not sent
    received = [splits_of(s)[me] for s in range(n)]
    w = per_rank(me, (sum(received), 2), np.float64, 29)
    got = gradient(mode, lambda t: hvd.alltoall(t, splits=tf.constant(splits, tf.int32))[0], x, w)
    # Row i of my input went to rank d; its gradient is d's weight for that row.
    want = np.zeros_like(x)
    row = 0
    for d in range(n):
        w_d = per_rank(d, (sum(splits_of(s)[d] for s in range(n)), 2), np.float64, 29)
        offset = sum(splits_of(s)[d] for s in range(me))
        want[row:row + splits[d]] = w_d[offset:offset + splits[d]]
        row += splits[d]
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_gradient(op, mode):
    n, me = hvd.size(), hvd.rank()
    rows = 2 * n
    blocks = [per_rank(r, (2, 3), np.float64, 30) for r in range(n)]  # every rank's upstream gradient
    x = per_rank(me, (rows, 3), np.float64, 31)
    got = gradient(mode, lambda t: hvd.reducescatter(t, op=op), x, blocks[me])
    # Horovod's gradient: the allgather of the gradients, times size for Sum.
    want = np.concatenate(blocks) * (n if op == hvd.Sum else 1)
    np.testing.assert_allclose(got, want)
