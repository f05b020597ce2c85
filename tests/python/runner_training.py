"""A short data-parallel training with hora.torch, run through hora.spark and hora.ray, and the
same training in one process as its reference: with equal shards, the average of the ranks'
gradients is the gradient of the mean loss over all shards, so the trained weights must match."""

STEPS = 5
RANKS = 2


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _shard(rank):
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(32, 8, generator=g)
    return x, x.sum(1, keepdim=True)


def train():
    """One rank: returns (the averaged loss at every step, the trained weights)."""
    import torch
    import hora.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = _shard(hvd.rank())
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), op=hvd.Average, name="loss").item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def reference():
    """The same steps in one process on all shards at once: the weights after training."""
    import torch

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    shards = [_shard(r) for r in range(RANKS)]
    x, y = torch.cat([s[0] for s in shards]), torch.cat([s[1] for s in shards])
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().numpy() for p in model.parameters()]


def check(results):
    """The ranks agree on every loss and weight, the loss fell, and the weights are the reference's."""
    import numpy

    (losses0, weights0), (losses1, weights1) = results
    assert losses0 == losses1
    assert losses0[-1] < losses0[0]
    for a, b, want in zip(weights0, weights1, reference()):
        numpy.testing.assert_array_equal(a, b)
        numpy.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
