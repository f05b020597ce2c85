"""Gradients through the collectives, as Horovod's autograd Functions define them, against numpy.

Every rank d back-propagates its own upstream gradient up_d (random, reproducible by any rank
from d's seed), so each expected gradient is a formula over all ranks' up_d:
  allreduce / grouped_allreduce   the same reduction of the up_d (op, prescale, postscale)
  allgather / grouped_allgather   this rank's rows of the mean of the up_d
  broadcast                       the mean of the up_d on the root, zeros elsewhere
  alltoall                        the rows each rank received from this one, sent back
  reducescatter (+grouped)        the up_d concatenated, times the set's size for Sum, times
                                  prescale and postscale (Horovod's definition)
"""

import itertools

import numpy as np
import pytest
import torch

import hora.torch as hvd

DTYPES = [torch.float32, torch.float64]
DIMS = [1, 2, 3]


def upstream(d, shape, seed):
    """Rank d's upstream gradient for an output of `shape`."""
    return np.random.RandomState(1000 * seed + d).uniform(-1, 1, size=shape)


def leaf(values, dtype):
    return torch.tensor(values, dtype=dtype).requires_grad_()


def backprop(output, d, seed, dtype):
    output.backward(torch.tensor(upstream(d, tuple(output.shape), seed), dtype=dtype))


def close(got, want):
    np.testing.assert_allclose(got.detach().numpy().astype(np.float64), want, rtol=1e-5, atol=1e-5)


def even_odd_sets():
    """Horovod's test layout: the even and the odd ranks, and this rank's set."""
    n, r = hvd.size(), hvd.rank()
    even = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odd = hvd.add_process_set([k for k in range(n) if k % 2 == 1])
    return even, odd, (even if r % 2 == 0 else odd)


@pytest.fixture
def sets():
    if hvd.size() < 2:
        pytest.skip("process sets need 2 ranks")
    even, odd, mine = even_odd_sets()
    yield mine
    hvd.remove_process_set(odd)
    hvd.remove_process_set(even)


def check_allreduce_grad(dtype, dim, op, pre, post, members, process_set, seed):
    shape = (3,) * dim
    x = leaf(np.ones(shape), dtype)
    backprop(hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set),
             hvd.rank(), seed, dtype)
    total = sum(upstream(d, shape, seed) for d in members)
    close(x.grad, total * pre * post / (len(members) if op == hvd.Average else 1))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 0.5, 3.0)])
def test_allreduce_grad(dtype, dim, op, pre, post):
    check_allreduce_grad(dtype, dim, op, pre, post, range(hvd.size()), hvd.global_process_set, seed=1)


def test_allreduce_grad_process_sets(sets):
    check_allreduce_grad(torch.float64, 2, hvd.Average, 2.0, 1.0, sets.ranks, sets, seed=2)


def check_grouped_allreduce_grad(dtype, dim, op, pre, post, members, process_set, seed):
    shapes = [(2,) * dim, (4,) * dim, (1,) * dim]
    xs = [leaf(np.ones(s), dtype) for s in shapes]
    outs = hvd.grouped_allreduce(xs, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set)
    sum(o.mul(torch.tensor(upstream(hvd.rank(), s, seed + i), dtype=dtype)).sum()
        for i, (o, s) in enumerate(zip(outs, shapes))).backward()
    for i, (x, s) in enumerate(zip(xs, shapes)):
        total = sum(upstream(d, s, seed + i) for d in members)
        close(x.grad, total * pre * post / (len(members) if op == hvd.Average else 1))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 0.5, 4.0)])
def test_grouped_allreduce_grad(dtype, dim, op, pre, post):
    check_grouped_allreduce_grad(dtype, dim, op, pre, post, range(hvd.size()), hvd.global_process_set, seed=10)


def test_grouped_allreduce_grad_process_sets(sets):
    check_grouped_allreduce_grad(torch.float32, 2, hvd.Sum, 1.0, 1.0, sets.ranks, sets, seed=20)


def rows_of(members, me):
    """Member s contributes s + 2 rows (different per rank, as allgather allows)."""
    offsets = np.cumsum([0] + [s + 2 for s in members])
    i = list(members).index(me)
    return offsets[i], offsets[i + 1], int(offsets[-1])


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
def test_allgather_grad(dtype, dim):
    r, members = hvd.rank(), list(range(hvd.size()))
    x = leaf(np.ones((r + 2,) + (2,) * (dim - 1)), dtype)
    out = hvd.allgather(x)
    backprop(out, r, 30, dtype)
    start, stop, total = rows_of(members, r)
    mean = sum(upstream(d, (total,) + (2,) * (dim - 1), 30) for d in members) / len(members)
    close(x.grad, mean[start:stop])


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
def test_grouped_allgather_grad(dtype, dim):
    r, members = hvd.rank(), list(range(hvd.size()))
    tail = (2,) * (dim - 1)
    xs = [leaf(np.ones((r + 2,) + tail), dtype), leaf(np.ones((r + 2,) + tail), dtype)]
    outs = hvd.grouped_allgather(xs)
    sum(o.mul(torch.tensor(upstream(r, tuple(o.shape), 40 + i), dtype=dtype)).sum()
        for i, o in enumerate(outs)).backward()
    start, stop, total = rows_of(members, r)
    for i, x in enumerate(xs):
        mean = sum(upstream(d, (total,) + tail, 40 + i) for d in members) / len(members)
        close(x.grad, mean[start:stop])


def test_allgather_grad_process_sets(sets):
    r, members = hvd.rank(), sets.ranks
    x = leaf(np.ones((r + 2, 3)), torch.float64)
    backprop(hvd.allgather(x, process_set=sets), r, 50, torch.float64)
    start, stop, total = rows_of(members, r)
    close(x.grad, (sum(upstream(d, (total, 3), 50) for d in members) / len(members))[start:stop])


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
def test_broadcast_grad(dtype, dim):
    n, r = hvd.size(), hvd.rank()
    shape = (3,) * dim
    for root in range(n):
        x = leaf(np.full(shape, float(r)), dtype)
        out = hvd.broadcast(x, root)
        close(out, np.full(shape, float(root)))
        backprop(out, r, 60 + root, dtype)
        mean = sum(upstream(d, shape, 60 + root) for d in range(n)) / n
        close(x.grad, mean if r == root else np.zeros(shape))


def test_broadcast_grad_process_sets(sets):
    r = hvd.rank()
    for root in sets.ranks:  # global ranks, as Horovod numbers roots
        x = leaf(np.full((4, 2), float(r)), torch.float64)
        out = hvd.broadcast(x, root, process_set=sets)
        close(out, np.full((4, 2), float(root)))
        backprop(out, r, 70 + root, torch.float64)
        mean = sum(upstream(d, (4, 2), 70 + root) for d in sets.ranks) / len(sets.ranks)
        close(x.grad, mean if r == root else np.zeros((4, 2)))


def alltoall_splits(s, members):
    """Member s sends (s + j) % 3 + 1 rows to the j-th member."""
    return [(s + j) % 3 + 1 for j in range(len(members))]


def check_alltoall_grad(dtype, dim, members, process_set, with_splits, seed):
    r, k = hvd.rank(), len(members)
    tail = (2,) * (dim - 1)
    me = members.index(r)
    sends = {s: alltoall_splits(s, members) if with_splits else [2] * k for s in members}
    x = leaf(np.ones((sum(sends[r]),) + tail), dtype)
    if with_splits:
        out, received = hvd.alltoall(x, torch.tensor(sends[r], dtype=torch.int32), process_set=process_set)
        assert received.dtype == torch.int32 and received.tolist() == [sends[s][me] for s in members]
        assert not received.requires_grad
    else:
        out = hvd.alltoall(x, process_set=process_set)
    backprop(out, r, seed, dtype)
    # The rows x sent to member j sit in j's output after the rows of the members before r.
    want = []
    for j, d in enumerate(members):
        received_by_d = [sends[s][j] for s in members]
        up = upstream(d, (sum(received_by_d),) + tail, seed)
        start = sum(received_by_d[:me])
        want.append(up[start:start + sends[r][j]])
    close(x.grad, np.concatenate(want))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
@pytest.mark.parametrize("with_splits", [True, False])
def test_alltoall_grad(dtype, dim, with_splits):
    check_alltoall_grad(dtype, dim, list(range(hvd.size())), hvd.global_process_set, with_splits, seed=80)


def test_alltoall_grad_process_sets(sets):
    check_alltoall_grad(torch.float64, 2, sets.ranks, sets, True, seed=90)


def reducescatter_factor(op, k, pre, post):
    return (k if op == hvd.Sum else 1) * pre * post


def check_reducescatter_grad(dtype, dim, op, pre, post, members, process_set, seed):
    r, k = hvd.rank(), len(members)
    tail = (3,) * (dim - 1)
    rows = 2 * k + 1  # uneven: the first member keeps one more row
    x = leaf(np.ones((rows,) + tail), dtype)
    out = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set)
    mine = rows // k + (1 if members.index(r) < rows % k else 0)
    assert out.shape[0] == mine
    close(out, np.ones((mine,) + tail) * pre * post * (k if op == hvd.Sum else 1))
    backprop(out, r, seed, dtype)
    blocks = [upstream(d, (rows // k + (1 if i < rows % k else 0),) + tail, seed) for i, d in enumerate(members)]
    close(x.grad, np.concatenate(blocks) * reducescatter_factor(op, k, pre, post))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 1.0),
                                         (hvd.Average, 1.0, 0.5)])
def test_reducescatter_grad(dtype, dim, op, pre, post):
    check_reducescatter_grad(dtype, dim, op, pre, post, list(range(hvd.size())), hvd.global_process_set, seed=100)


def test_reducescatter_grad_process_sets(sets):
    check_reducescatter_grad(torch.float64, 2, hvd.Sum, 1.0, 1.0, sets.ranks, sets, seed=110)


def check_grouped_reducescatter_grad(dtype, dim, op, pre, post, members, process_set, seed):
    r, k = hvd.rank(), len(members)
    tail = (2,) * (dim - 1)
    xs = [leaf(np.ones((k * m,) + tail), dtype) for m in (1, 2, 3)]
    outs = hvd.grouped_reducescatter(xs, op=op, prescale_factor=pre, postscale_factor=post, process_set=process_set)
    sum(o.mul(torch.tensor(upstream(r, tuple(o.shape), seed + i), dtype=dtype)).sum()
        for i, o in enumerate(outs)).backward()
    for i, (x, m) in enumerate(zip(xs, (1, 2, 3))):
        blocks = [upstream(d, (m,) + tail, seed + i) for d in members]
        close(x.grad, np.concatenate(blocks) * reducescatter_factor(op, k, pre, post))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES, DIMS))
@pytest.mark.parametrize("op,pre,post", [(hvd.Sum, 1.0, 1.0), (hvd.Average, 3.0, 0.5)])
def test_grouped_reducescatter_grad(dtype, dim, op, pre, post):
    check_grouped_reducescatter_grad(dtype, dim, op, pre, post, list(range(hvd.size())), hvd.global_process_set,
                                     seed=120)


def test_grouped_reducescatter_grad_process_sets(sets):
    check_grouped_reducescatter_grad(torch.float32, 1, hvd.Average, 1.0, 1.0, sets.ranks, sets, seed=130)
