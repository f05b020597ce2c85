"""op=hvd.Adasum (Horovod's Adasum, src/collectives/adasum.h) against numpy: the formula on whole
tensors, combined as a pairwise tree over the ranks (0 with 1, 2 with 3, then those pairs, ...).
Adasum runs on a power-of-two number of ranks only, so at np 3 these tests skip (the refusals
are test_api.py's)."""

import numpy as np
import pytest
import torch

import hora.torch as hvd
from conftest import per_rank



def skip_unless_power_of_two():
    n = hvd.size()
    if n & (n - 1):
        pytest.skip(f"Adasum needs a power-of-two number of ranks; this job has {n}")


def adasum_pair(a, b):
    """(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b; a coefficient stays 1 for a (near) zero norm."""
    dot, aa, bb = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    ca = 1 - dot / (2 * aa) if aa >= tiny else 1.0
    cb = 1 - dot / (2 * bb) if bb >= tiny else 1.0
    return ca * a + cb * b


def adasum_numpy(per_rank_arrays):
    """The tree over the ranks of one tensor, in float64."""
    level = [np.asarray(x, dtype=np.float64).ravel() for x in per_rank_arrays]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0].reshape(np.shape(per_rank_arrays[0]))


def reference(shape, dtype, seed):
    inputs = [per_rank(r, shape, dtype, seed).to(torch.float64).numpy() for r in range(hvd.size())]
    return adasum_numpy(inputs)


def close(got, want, rtol):
    """Relative to each element, with a floor of 1% of the largest (elements that cancel)."""
    got = got.to(torch.float64).numpy()
    floor = 0.01 * np.max(np.abs(want)) if want.size else 0.0
    return bool(np.all(np.abs(got - want) <= rtol * np.maximum(np.abs(want), floor)))


def test_allreduce_forms_match_numpy():
    skip_unless_power_of_two()
    r = hvd.rank()
    results = []
    for dtype, rtol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        for seed, shape in enumerate([(1,), (7,), (33, 5)]):
            x = per_rank(r, shape, dtype, seed)
            results.append(("allreduce", hvd.allreduce(x, op=hvd.Adasum, name=f"ad.{dtype}.{seed}"), shape, dtype,
                            seed, rtol))
            h = hvd.allreduce_async(x, op=hvd.Adasum, name=f"ad.async.{dtype}.{seed}")
            results.append(("allreduce_async", hvd.synchronize(h), shape, dtype, seed, rtol))
            y = x.clone()
            hvd.allreduce_(y, op=hvd.Adasum, name=f"ad.inplace.{dtype}.{seed}")
            results.append(("allreduce_", y, shape, dtype, seed, rtol))
    for form, got, shape, dtype, seed, rtol in results:
        assert close(got, reference(shape, dtype, seed), rtol), (form, dtype, shape)


def test_grouped_allreduce_reduces_each_tensor_on_its_own():
    skip_unless_power_of_two()
    r = hvd.rank()
    shapes = [(3,), (100,), (1,), (8, 8)]
    tensors = [per_rank(r, s, torch.float32, 20 + i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name="ad.grouped")
    inplace = [t.clone() for t in tensors]
    hvd.synchronize(hvd.grouped_allreduce_async_(inplace, op=hvd.Adasum, name="ad.grouped_"))
    for i, s in enumerate(shapes):
        want = reference(s, torch.float32, 20 + i)
        assert close(outs[i], want, 1e-5), ("grouped_allreduce", i)
        assert close(inplace[i], want, 1e-5), ("grouped_allreduce_async_", i)
    # The tensors differ, so one set of coefficients for all of them would not match (one rank
    # has no coefficients at all: Adasum of one rank is its input).
    if hvd.size() == 1:
        return
    whole = adasum_numpy([np.concatenate([per_rank(q, s, torch.float32, 20 + i).to(torch.float64).numpy().ravel()
                                          for i, s in enumerate(shapes)]) for q in range(hvd.size())])
    assert not close(torch.cat([o.ravel() for o in outs]), whole, 1e-3)


def test_half_precision_matches_numpy_loosely():
    skip_unless_power_of_two()
    r = hvd.rank()
    got = {dt: hvd.allreduce(per_rank(r, (64,), dt, 40), op=hvd.Adasum, name=f"ad.{dt}")
           for dt in (torch.float16, torch.bfloat16)}
    for dt, tol in ((torch.float16, 5e-3), (torch.bfloat16, 3e-2)):
        want = reference((64,), dt, 40)
        err = np.max(np.abs(got[dt].to(torch.float64).numpy() - want))
        assert err <= tol * np.max(np.abs(want)), (dt, err)


D_IN, D_OUT, LR = 6, 3, 0.1


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, D_IN, generator=g, dtype=torch.float64), torch.randn(8, D_OUT, generator=g,
                                                                               dtype=torch.float64)


def gradients(params, rank, step):
    """The gradients rank `rank` computes at `params` (a plain model, no hora)."""
    model = torch.nn.Linear(D_IN, D_OUT).double()
    with torch.no_grad():
        model.weight.copy_(params[0])
        model.bias.copy_(params[1])
    x, y = batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
    return [model.weight.grad.numpy().copy(), model.bias.grad.numpy().copy()]


def test_distributed_optimizer_adasum_reduces_the_step_deltas():
    skip_unless_power_of_two()
    torch.manual_seed(7)  # the same initial model on every rank
    model = torch.nn.Linear(D_IN, D_OUT).double()
    initial = [model.weight.detach().clone(), model.bias.detach().clone()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    after = []
    for step in range(2):
        x, y = batch(hvd.rank(), step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
        opt.step()
        after.append([model.weight.detach().clone(), model.bias.detach().clone()])
    # By hand: each rank's SGD delta is -lr * its gradient; the parameters move by the Adasum
    # of the deltas, each parameter on its own.
    params = [p.numpy() for p in initial]
    for step in range(2):
        deltas = [[-LR * g for g in gradients([torch.from_numpy(p) for p in params], q, step)]
                  for q in range(hvd.size())]
        params = [params[i] + adasum_numpy([d[i] for d in deltas]) for i in range(2)]
        for i in range(2):
            np.testing.assert_allclose(after[step][i].numpy(), params[i], rtol=1e-9, atol=1e-12)


def test_distributed_optimizer_adasum_accumulates_backward_passes():
    """backward_passes_per_step=2: the gradients of two passes add up locally, then one local step
    and one Adasum of its delta (Horovod's gradient accumulation with Adasum)."""
    skip_unless_power_of_two()
    torch.manual_seed(11)
    model = torch.nn.Linear(D_IN, D_OUT).double()
    initial = [model.weight.detach().clone(), model.bias.detach().clone()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    opt.zero_grad()
    for step in (3, 4):  # two batches, one optimizer step
        x, y = batch(hvd.rank(), step)
        torch.nn.functional.mse_loss(model(x), y, reduction="sum").backward()
    opt.step()
    got = [model.weight.detach().clone(), model.bias.detach().clone()]
    deltas = []
    for q in range(hvd.size()):
        g3, g4 = gradients(initial, q, 3), gradients(initial, q, 4)
        deltas.append([-LR * (a + b) for a, b in zip(g3, g4)])
    for i in range(2):
        want = initial[i].numpy() + adasum_numpy([d[i] for d in deltas])
        np.testing.assert_allclose(got[i].numpy(), want, rtol=1e-9, atol=1e-12)
