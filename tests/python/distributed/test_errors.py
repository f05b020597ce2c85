"""Errors raised where Horovod raises them, with Horovod's exception types, without putting the
ranks out of step: a second async operation under a name that is still in flight on this rank
raises ValueError at enqueue, on that rank only (Horovod's *_duplicate_name_error tests)."""

import numpy as np
import pytest
import torch

import hora.torch as hvd
from conftest import per_rank


def inputs(shape, dtype=torch.float32):
    return [per_rank(r, shape, dtype, seed=7) for r in range(hvd.size())]


def expected(kind, xs):
    """What every collective returns on this rank, from every rank's input (numpy)."""
    arrays = [x.numpy().astype(np.float64) for x in xs]
    size, rank = hvd.size(), hvd.rank()
    if kind == "allreduce":
        return sum(arrays)
    if kind == "allgather":
        return np.concatenate(arrays)
    if kind == "broadcast":
        return arrays[0]
    if kind == "reducescatter":  # Average, rows split evenly (the shape is a multiple of size)
        rows = arrays[0].shape[0] // size
        return (sum(arrays) / size)[rank * rows:(rank + 1) * rows]
    rows = arrays[0].shape[0] // size  # alltoall, even splits: block `rank` of every rank
    return np.concatenate([a[rank * rows:(rank + 1) * rows] for a in arrays])


def submit(kind, tensor, name):
    if kind == "allreduce":
        return hvd.allreduce_async(tensor, name=name, op=hvd.Sum)
    if kind == "allgather":
        return hvd.allgather_async(tensor, name=name)
    if kind == "broadcast":
        return hvd.broadcast_async(tensor, root_rank=0, name=name)
    if kind == "reducescatter":
        return hvd.reducescatter_async(tensor, name=name)
    return hvd.alltoall_async(tensor, name=name)


def submit_twice(kind, tensor, name):
    """The first submission stays in flight (some rank has not submitted the name yet); the
    second raises at once."""
    handle = submit(kind, tensor, name)
    with pytest.raises(ValueError) as info:
        submit(kind, tensor, name)
    assert f"'{name}' is already in flight on this rank" in str(info.value)
    return handle


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast", "reducescatter", "alltoall"])
def test_duplicate_name_raises_at_enqueue_on_that_rank_only(kind):
    if hvd.size() == 1:
        pytest.skip("the first submission would complete at once")
    xs = inputs([2 * hvd.size(), 3])
    mine = xs[hvd.rank()]
    # Rank 0 makes the mistake while the others have not submitted: its first stays in flight.
    handle_a = submit_twice(kind, mine, f"dup.{kind}.a") if hvd.rank() == 0 else None
    hvd.barrier()
    if hvd.rank() > 0:
        handle_a = submit(kind, mine, f"dup.{kind}.a")
    # Then the other ranks, while rank 0 holds back.
    handle_b = submit_twice(kind, mine, f"dup.{kind}.b") if hvd.rank() > 0 else None
    hvd.barrier()
    if hvd.rank() == 0:
        handle_b = submit(kind, mine, f"dup.{kind}.b")
    # The first submissions ran as if the second had not been made, and the job is in step.
    want = expected(kind, xs)
    for handle in (handle_a, handle_b):
        out = hvd.synchronize(handle)
        if kind == "alltoall":  # Horovod's alltoall_async gives (output, received_splits)
            out, received = out
            np.testing.assert_array_equal(received.numpy(), np.full(hvd.size(), 2))
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
    after = hvd.allreduce(torch.ones(3), name=f"dup.{kind}.after", op=hvd.Sum)
    np.testing.assert_allclose(after.numpy(), np.full(3, hvd.size()))
