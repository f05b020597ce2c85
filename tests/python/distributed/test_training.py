"""DistributedOptimizer, state broadcasts, SyncBatchNorm and the training helpers, against
single-process references computed on every rank from the whole (concatenated) batch."""

import copy
import os

import pytest
import torch

import hora.torch as hvd


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def global_batch(step, rows_per_rank, micro=1):
    """The whole batch of a step: every rank's shard (and micro-batch) in rank order."""
    g = torch.Generator().manual_seed(100 + step)
    n = hvd.size() * rows_per_rank * micro
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def shard(x, r, rows, k=0, micro=1):
    start = (r * micro + k) * rows
    return x[start:start + rows]


@pytest.mark.parametrize("optimizer_class,kwargs", [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    (torch.optim.Adam, {"lr": 0.01}),
])
@pytest.mark.parametrize("micro", [1, 2])
def test_distributed_optimizer_equals_training_on_the_whole_batch(optimizer_class, kwargs, micro):
    n, r, rows = hvd.size(), hvd.rank(), 4
    model = make_model(seed=r)  # different on purpose: the broadcast makes them equal
    reference = make_model(seed=0)
    opt = hvd.DistributedOptimizer(optimizer_class(model.parameters(), **kwargs),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=micro)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    ref_opt = optimizer_class(reference.parameters(), **kwargs)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(4):
        x, y = global_batch(step, rows, micro)
        opt.zero_grad()
        for k in range(micro):  # micro-batches accumulate locally, then one allreduce
            loss_fn(model(shard(x, r, rows, k, micro)), shard(y, r, rows, k, micro)).backward()
        opt.step()
        # The reference: the mean over ranks of each rank's summed micro-batch losses.
        ref_opt.zero_grad()
        total = sum(loss_fn(reference(shard(x, s, rows, k, micro)), shard(y, s, rows, k, micro))
                    for s in range(n) for k in range(micro)) / n
        total.backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5)
    assert isinstance(opt, optimizer_class)


def test_a_gradient_that_is_not_contiguous_is_averaged_too():
    # Contiguous CPU gradients go straight to the engine; any other takes the public allreduce.
    # (A gradient set by hand, not by backward: step() starts the allreduces no hook started.)
    n, r = hvd.size(), hvd.rank()
    weight = torch.nn.Parameter(torch.zeros(3, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([weight], lr=1.0), named_parameters=[("weight", weight)])
    values = torch.arange(24.0).reshape(3, 8)
    weight.grad = (values * (r + 1))[:, ::2]  # every other column: elements with gaps between
    assert not weight.grad.is_contiguous()
    opt.step()
    mean = sum(s + 1 for s in range(n)) / n
    torch.testing.assert_close(weight.detach(), -values[:, ::2] * mean)


def test_fp16_compression_and_predivide_stay_close():
    n, r, rows = hvd.size(), hvd.rank(), 4
    model, reference = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16, gradient_predivide_factor=2.0)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(3):
        x, y = global_batch(step, rows)
        opt.zero_grad()
        loss_fn(model(shard(x, r, rows)), shard(y, r, rows)).backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(loss_fn(reference(shard(x, s, rows)), shard(y, s, rows)) for s in range(n)) / n).backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=2e-3, atol=2e-3)


def test_broadcast_optimizer_state_copies_momentum_and_adam_moments():
    r = hvd.rank()
    for optimizer_class, kwargs in [(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}), (torch.optim.Adam, {"lr": 0.01})]:
        model = make_model()
        opt = optimizer_class(model.parameters(), **kwargs)
        for _ in range(r + 1):  # different state on every rank
            opt.zero_grad()
            model(torch.randn(5, 6) * (r + 1)).sum().backward()
            opt.step()
        opt.param_groups[0]["lr"] = 0.5 if r == 0 else 0.7
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        state = hvd.broadcast_object(opt.state_dict(), 0)
        mine = opt.state_dict()
        assert mine["param_groups"][0]["lr"] == 0.5
        for key, value in state["state"].items():
            for field, tensor in value.items():
                torch.testing.assert_close(torch.as_tensor(mine["state"][key][field]), torch.as_tensor(tensor))
    # State not created yet on any rank: stays empty everywhere, and training can start.
    fresh = torch.optim.Adam(make_model().parameters())
    hvd.broadcast_optimizer_state(fresh, root_rank=0)
    assert fresh.state_dict()["state"] == {}


def test_misuse_is_reported_as_horovod_does():
    model = make_model()
    with pytest.raises(ValueError, match="must be unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[("same", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=list(model.named_parameters())[:1])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
    model(torch.randn(2, 6)).sum().backward()
    if hvd.size() > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()


def test_unused_parameters_and_groups():
    n, r = hvd.size(), hvd.rank()
    model = make_model()
    extra = torch.nn.Parameter(torch.ones(2))  # never used in the forward pass
    params = list(model.parameters()) + [extra]
    named = list(model.named_parameters()) + [("extra", extra)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named, groups=2)
    x = torch.full((3, 6), float(r + 1))
    model(x).sum().backward()
    opt.step()
    torch.testing.assert_close(extra.detach(), torch.ones(2))  # its zero gradient was averaged too
    grads = hvd.allgather_object([p.detach().clone() for p in model.parameters()])
    for p in zip(*grads):
        for q in p[1:]:
            torch.testing.assert_close(q, p[0])


def test_sync_batch_norm_uses_the_statistics_of_every_rank():
    n, r = hvd.size(), hvd.rank()
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(3 + s, 4, 5, generator=g) * (s + 1) for s in range(n)]
    sync = hvd.SyncBatchNorm(4)
    plain = torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        sync.weight.copy_(torch.linspace(0.5, 2, 4))
        plain.weight.copy_(torch.linspace(0.5, 2, 4))
    mine = xs[r].clone().requires_grad_(True)
    out = sync(mine)
    (out * out.detach().sign()).sum().backward()
    whole = torch.cat(xs).requires_grad_(True)
    ref = plain(whole)
    (ref * ref.detach().sign()).sum().backward()
    start = sum(x.shape[0] for x in xs[:r])
    torch.testing.assert_close(out, ref[start:start + xs[r].shape[0]], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mine.grad, whole.grad[start:start + xs[r].shape[0]], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sync.running_mean, plain.running_mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(sync.running_var, plain.running_var, rtol=1e-4, atol=1e-5)
    grads = hvd.allgather_object(sync.weight.grad.clone())
    torch.testing.assert_close(sum(grads), plain.weight.grad, rtol=1e-4, atol=1e-4)


def test_metric_averaging_warmup_and_rank0_checkpoints(tmp_path):
    n, r = hvd.size(), hvd.rank()
    averaged = hvd.average_metrics({"loss": float(r), "accuracy": 0.5 + r})
    assert averaged["loss"] == pytest.approx((n - 1) / 2)
    assert averaged["accuracy"] == pytest.approx(0.5 + (n - 1) / 2)
    opt = torch.optim.SGD(make_model().parameters(), lr=1.0)
    warmup = hvd.LearningRateWarmup(opt, base_lr=0.1, warmup_epochs=2, steps_per_epoch=10)
    assert warmup.step(0, 0) == pytest.approx(0.1)
    assert warmup.step(1, 0) == pytest.approx(0.1 * (1 + (n - 1) / 2))
    assert warmup.step(5) == pytest.approx(0.1 * n) and opt.param_groups[0]["lr"] == pytest.approx(0.1 * n)
    schedule = hvd.LearningRateSchedule(opt, initial_lr=0.4, multiplier=lambda e: 0.1 ** (e // 2), start_epoch=2)
    assert schedule.step(1) is None and schedule.step(3) == pytest.approx(0.04)
    path = hvd.broadcast_object(str(tmp_path / "ckpt.pt"), 0)
    hvd.save_checkpoint({"epoch": 3}, path)
    hvd.barrier()
    if r == 0:
        assert torch.load(path) == {"epoch": 3}
        assert [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".checkpoint-")] == []
