"""Every collective of hora.torch against a reference computed from all ranks' inputs."""

import functools

import pytest
import torch

import hora.torch as hvd
from conftest import per_rank

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def tolerance(dtype):
    return {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-6)


def all_inputs(shape, dtype, seed=0):
    return [per_rank(r, shape, dtype, seed) for r in range(hvd.size())]


def reference(inputs, op):
    wide = [t.to(torch.float64) for t in inputs]
    if op == hvd.Sum:
        out = functools.reduce(torch.add, wide)
    elif op == hvd.Average:
        out = functools.reduce(torch.add, wide) / len(wide)
    elif op == hvd.Min:
        out = functools.reduce(torch.minimum, wide)
    elif op == hvd.Max:
        out = functools.reduce(torch.maximum, wide)
    else:
        out = functools.reduce(torch.mul, wide)
    return out


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_every_type_and_op(dtype, op):
    if op == hvd.Average and not dtype.is_floating_point:
        pytest.skip("Average of integers truncates; covered by test_dtypes.py")
    if op == hvd.Product and dtype in (torch.float16, torch.bfloat16):
        pytest.skip("products overflow narrow types")
    shape = (3, 17)
    inputs = all_inputs(shape, dtype)
    out = hvd.allreduce(inputs[hvd.rank()], op=op, name=f"ar.{dtype}.{op}")
    assert out.dtype == dtype and out.shape == shape
    want = reference(inputs, op)
    if not dtype.is_floating_point:
        want = want.to(dtype)
    torch.testing.assert_close(out.to(torch.float64), want.to(torch.float64), rtol=tolerance(dtype), atol=tolerance(dtype))


def test_allreduce_forms_inplace_async_noncontiguous_and_scales():
    inputs = all_inputs((8, 6), torch.float32, seed=1)
    mine = inputs[hvd.rank()].clone()
    total = reference(inputs, hvd.Sum).to(torch.float32)

    inplace = mine.clone()
    assert hvd.allreduce_(inplace, op=hvd.Sum, name="inplace") is inplace
    torch.testing.assert_close(inplace, total)

    handle = hvd.allreduce_async(mine, op=hvd.Sum, name="async")
    out = hvd.synchronize(handle)
    torch.testing.assert_close(out, total)
    torch.testing.assert_close(mine, inputs[hvd.rank()])  # the out-of-place form leaves its input alone
    with pytest.raises(ValueError):
        hvd.poll(handle)  # synchronized handles are gone

    view = mine.clone().t()  # not contiguous
    assert not view.is_contiguous()
    torch.testing.assert_close(hvd.allreduce(view, op=hvd.Sum, name="noncontig"), total.t())
    hvd.allreduce_(view, op=hvd.Sum, name="noncontig.inplace")
    torch.testing.assert_close(view, total.t())

    scaled = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, name="scaled")
    torch.testing.assert_close(scaled, total * 0.5)
    deprecated = hvd.allreduce(mine, average=False, name="average.false")
    torch.testing.assert_close(deprecated, total)


def test_grouped_allreduce_and_fp16_compression():
    inputs = [all_inputs((5 + i,), torch.float32, seed=10 + i) for i in range(4)]
    outs = hvd.grouped_allreduce([x[hvd.rank()] for x in inputs], op=hvd.Sum, name="group")
    for out, x in zip(outs, inputs):
        torch.testing.assert_close(out, reference(x, hvd.Sum).to(torch.float32))
    tensors = [x[hvd.rank()].clone() for x in inputs]
    hvd.grouped_allreduce_(tensors, op=hvd.Average, name="group.inplace")
    for out, x in zip(tensors, inputs):
        torch.testing.assert_close(out, reference(x, hvd.Average).to(torch.float32))
    compressed = hvd.allreduce(inputs[0][hvd.rank()], op=hvd.Average, compression=hvd.Compression.fp16, name="fp16")
    assert compressed.dtype == torch.float32
    torch.testing.assert_close(compressed, reference(inputs[0], hvd.Average).to(torch.float32), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_allgather_with_different_first_dimensions(dtype):
    inputs = [per_rank(r, (r + 1, 3, 2), dtype, seed=2) for r in range(hvd.size())]
    out = hvd.allgather(inputs[hvd.rank()], name=f"ag.{dtype}")
    assert out.dtype == dtype
    torch.testing.assert_close(out, torch.cat(inputs))
    grouped = hvd.grouped_allgather([inputs[hvd.rank()], inputs[hvd.rank()][:, 0]], name=f"gag.{dtype}")
    torch.testing.assert_close(grouped[0], torch.cat(inputs))
    torch.testing.assert_close(grouped[1], torch.cat([x[:, 0] for x in inputs]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_broadcast_from_every_root(dtype):
    inputs = all_inputs((4, 5), dtype, seed=3)
    for root in range(hvd.size()):
        out = hvd.broadcast(inputs[hvd.rank()], root, name=f"bc.{dtype}.{root}")
        torch.testing.assert_close(out, inputs[root])
        inplace = inputs[hvd.rank()].clone()
        hvd.broadcast_(inplace, root, name=f"bc_.{dtype}.{root}")
        torch.testing.assert_close(inplace, inputs[root])


def test_alltoall_even_and_with_splits():
    n, r = hvd.size(), hvd.rank()
    even = torch.arange(2 * n, dtype=torch.float32) + 100 * r
    out = hvd.alltoall(even, name="a2a.even")
    torch.testing.assert_close(out, torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * s
                                               for s in range(n)]))
    # Rank s sends d + 1 rows to rank d; rows carry (sender, destination).
    def rows(s):
        return torch.cat([torch.tensor([[s, d]] * (d + 1), dtype=torch.int32) for d in range(n)])
    splits = [d + 1 for d in range(n)]
    got, received = hvd.alltoall(rows(r), splits=torch.tensor(splits, dtype=torch.int32), name="a2a.splits")
    torch.testing.assert_close(got, torch.cat([torch.tensor([[s, r]] * (r + 1), dtype=torch.int32) for s in range(n)]))
    assert received.tolist() == [r + 1] * n


def test_reducescatter_keeps_each_ranks_block():
    n, r = hvd.size(), hvd.rank()
    inputs = all_inputs((2 * n + 1, 3), torch.float64, seed=4)
    out = hvd.reducescatter(inputs[r], op=hvd.Sum, name="rs")
    total = reference(inputs, hvd.Sum)
    rows = [(2 * n + 1) // n + (1 if d < (2 * n + 1) % n else 0) for d in range(n)]
    start = sum(rows[:r])
    torch.testing.assert_close(out, total[start:start + rows[r]])


def test_autograd_through_allreduce_allgather_broadcast():
    n, r = hvd.size(), hvd.rank()
    x = torch.full((3,), float(r + 1), requires_grad=True)
    hvd.allreduce(x * 2, op=hvd.Sum, name="grad.ar").sum().backward()
    # d/dx_r of sum over ranks of sum(allreduce(2 x)) = 2 * n
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0 * n))

    y = torch.full((r + 1, 2), 1.0, requires_grad=True)
    gathered = hvd.allgather(y, name="grad.ag")
    (gathered * torch.arange(gathered.shape[0], dtype=torch.float32)[:, None]).sum().backward()
    start = sum(range(1, r + 1))
    want = torch.arange(start, start + r + 1, dtype=torch.float32)[:, None].expand(r + 1, 2)
    torch.testing.assert_close(y.grad, want)

    z = torch.ones(4, requires_grad=True)
    hvd.broadcast(z, 0, name="grad.bc").sum().backward()
    torch.testing.assert_close(z.grad, torch.ones(4) if r == 0 else torch.zeros(4))


def test_objects_and_poll():
    n, r = hvd.size(), hvd.rank()
    assert hvd.broadcast_object({"epoch": 7, "rank": r} if r == 0 else None, 0) == {"epoch": 7, "rank": 0}
    assert hvd.allgather_object(("r", r)) == [("r", s) for s in range(n)]
    handle = hvd.allreduce_async(torch.ones(1000), name="polled")
    while not hvd.poll(handle):
        pass
    torch.testing.assert_close(hvd.synchronize(handle), torch.ones(1000))


def test_identity_and_capabilities():
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert hvd.local_size() * hvd.cross_size() == hvd.size() and hvd.is_homogeneous()
    assert (hvd.mpi_built(), hvd.gloo_built(), hvd.nccl_built(), hvd.cuda_built()) == (False, False, 0, False)
    assert hvd.HorovodInternalError is hvd.HoraInternalError
    assert issubclass(hvd.MismatchError, hvd.HoraInternalError)


def test_mismatched_shapes_raise_on_every_rank():
    if hvd.size() > 1:
        with pytest.raises(hvd.MismatchError) as info:
            hvd.allreduce(torch.ones(3 + hvd.rank()), name="mismatch")
        assert "Mismatched shapes for tensor 'mismatch'" in str(info.value)
        hvd.allreduce(torch.ones(3), name="after.mismatch")  # the job goes on
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), name="bool")
    if hvd.size() & (hvd.size() - 1):  # Adasum runs on a power-of-two number of ranks only
        with pytest.raises(NotImplementedError):
            hvd.allreduce(torch.ones(2), op=hvd.Adasum)


def test_join_with_uneven_batches():
    n, r = hvd.size(), hvd.rank()
    for step in range(r + 1):  # rank r has r + 1 batches
        out = hvd.allreduce(torch.full((4,), float(r + 1)), op=hvd.Average, name="join.grad")
        contributors = [s for s in range(n) if step < s + 1]
        # Horovod's Average divides by every rank, the joined ones' zeros included
        torch.testing.assert_close(out, torch.full((4,), sum(s + 1.0 for s in contributors) / n))
    assert hvd.join() == n - 1


def test_process_sets_and_barrier():
    n, r = hvd.size(), hvd.rank()
    hvd.barrier()
    if n < 3:
        return  # [0, 1] would be the global set again (test_process_sets.py covers 2 ranks)
    pair = hvd.add_process_set([0, 1])
    try:
        assert pair.size() == 2 and pair.included() == (r < 2)
        if r < 2:
            out = hvd.allreduce(torch.tensor([float(r + 1)]), op=hvd.Sum, process_set=pair, name="pair")
            torch.testing.assert_close(out, torch.tensor([3.0]))
            b = hvd.broadcast(torch.tensor([r]), 1, process_set=pair, name="pair.bc")
            assert b.item() == 1
        else:
            with pytest.raises(ValueError):
                hvd.allreduce(torch.ones(1), process_set=pair, name="not.mine")
    finally:
        hvd.remove_process_set(pair)


def test_timeline_starts_and_stops(tmp_path):
    path = str(tmp_path / "timeline.json") if hvd.rank() == 0 else "/dev/null"
    path = hvd.broadcast_object(path, 0)
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(10), name="traced.tensor")
    hvd.barrier()
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        import json
        with open(path) as f:
            events = json.load(f)
        names = {e.get("name") for e in events}
        assert "NEGOTIATE_ALLREDUCE" in names and "ALLREDUCE" in names
