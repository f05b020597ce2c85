"""DistributedOptimizer, broadcast_optimizer_state, SyncBatchNorm and re-initialisation: the
behaviours Horovod's own PyTorch tests check, on CPU (one test per behaviour)."""

import copy
import inspect
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hora.torch as hvd

N, D_IN, H, D_OUT = 16, 20, 10, 10


def every_torch_optimizer():
    """The optimizers of torch.optim that take dense gradients (LBFGS needs a closure,
    SparseAdam sparse gradients), in a fixed order so every rank builds the same ones."""
    found = [c for c in torch.optim.Optimizer.__subclasses__()
             if c.__module__.startswith("torch.optim") and c not in (torch.optim.LBFGS, torch.optim.SparseAdam)]
    return sorted(found, key=lambda c: c.__name__)


def construct(cls, model, options):
    accepted = inspect.signature(cls.__init__).parameters
    return cls(model.parameters(), **{k: v for k, v in options.items() if k in accepted})


def sequential():
    return torch.nn.Sequential(torch.nn.Linear(D_IN, H), torch.nn.ReLU(), torch.nn.Linear(H, D_OUT))


def one_step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(N, D_IN, generator=g), torch.randn(N, D_OUT, generator=g)
    optimizer.zero_grad()
    F.mse_loss(model(x), y, reduction="sum").backward()
    optimizer.step()


def state_values(optimizer):
    """(key, value) of every per-parameter state entry and every hyper-parameter, in order."""
    sd = optimizer.state_dict()
    out = [(k, v) for group in sd["param_groups"] for k, v in sorted(group.items()) if k != "params"]
    for pid in sorted(sd["state"]):
        out += sorted(sd["state"][pid].items())
    return out


def assert_equal_on_every_rank(values):
    """Every rank holds rank 0's values: compared through allgather_object (pickled), so the
    check does not rely on the broadcast under test."""
    as_numpy = [(k, v.numpy().copy() if torch.is_tensor(v) else v) for k, v in values]
    gathered = hvd.allgather_object(as_numpy)
    for other in gathered[1:]:
        assert [k for k, _ in other] == [k for k, _ in gathered[0]]
        for (key, a), (_, b) in zip(gathered[0], other):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=key)
            else:
                assert a == b, key


@pytest.mark.parametrize("options", [dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2)],
                         ids=["momentum", "plain"])
def test_broadcast_state_of_every_optimizer(options):
    for cls in every_torch_optimizer():
        torch.manual_seed(100 + hvd.rank())  # different models and states on every rank
        model = sequential()
        optimizer = hvd.DistributedOptimizer(construct(cls, model, options), named_parameters=model.named_parameters())
        one_step(model, optimizer, seed=hvd.rank())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        assert_equal_on_every_rank(sorted(model.state_dict().items()))
        assert_equal_on_every_rank(state_values(optimizer))
        one_step(model, optimizer, seed=7)  # the same data everywhere: the models stay equal
        assert_equal_on_every_rank(sorted(model.state_dict().items()))


def test_the_wrapped_optimizer_keeps_the_state_it_holds():
    """Horovod makes its wrapper from the param_groups alone, which loses the optimizer's state:
    Adagrad's sums then start at 0, not at its initial_accumulator_value, and a checkpoint loaded
    before wrapping is dropped. Here both carry over, and the wrapped Adagrad steps as torch's own
    (the same data on every rank: the average is the local gradient)."""
    torch.manual_seed(3)
    model, reference = sequential(), sequential()
    reference.load_state_dict(model.state_dict())
    wrapped = hvd.DistributedOptimizer(torch.optim.Adagrad(model.parameters(), lr=0.1, initial_accumulator_value=0.5),
                                       named_parameters=model.named_parameters())
    plain = torch.optim.Adagrad(reference.parameters(), lr=0.1, initial_accumulator_value=0.5)
    for seed in (1, 2):
        one_step(model, wrapped, seed)
        one_step(reference, plain, seed)
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)

    loaded = torch.optim.Adagrad(model.parameters(), lr=0.1)  # its sums start at 0 ...
    loaded.load_state_dict(plain.state_dict())  # ... until the checkpoint's come
    state = hvd.DistributedOptimizer(loaded, named_parameters=model.named_parameters()).state_dict()["state"]
    assert sorted(state) == sorted(plain.state_dict()["state"])
    for index, entries in plain.state_dict()["state"].items():
        torch.testing.assert_close(state[index]["sum"], entries["sum"])


def test_broadcast_state_options_take_the_roots_types_and_values():
    root_options = dict(lr=0.1, momentum=0.8, weight_decay=0.2, nesterov=True, betas=(0.9, 0.999),
                        etas=(0.8, 2.4), step_sizes=(1e-5, 100))
    other_options = dict(lr=0.2, momentum=0.9, weight_decay=0.1, nesterov=False, betas=(0.8, 0.9),
                         etas=(0.25, 1.75), step_sizes=(1e-7, 5))
    wrong = []
    for cls in every_torch_optimizer():
        model = sequential()
        mine = root_options if hvd.rank() == 0 else other_options
        optimizer = hvd.DistributedOptimizer(construct(cls, model, mine), named_parameters=model.named_parameters())
        one_step(model, optimizer, seed=1)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        accepted = inspect.signature(cls.__init__).parameters
        for key, expected in root_options.items():
            actual = optimizer.param_groups[0].get(key)
            if key in accepted and (type(actual) is not type(expected)
                                    or not np.allclose(np.atleast_1d(actual), np.atleast_1d(expected), rtol=1e-6)):
                wrong.append(f"{cls.__name__}.{key}: {actual!r} (root: {expected!r})")
        one_step(model, optimizer, seed=2)
    assert not wrong  # checked after every rank has run every collective, so the ranks stay in step


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, H)
        self.fc2 = torch.nn.Linear(H, D_OUT)
        self.fc3 = torch.nn.Linear(D_OUT, D_OUT)

    def forward(self, x):
        hidden = self.fc2(F.relu(self.fc1(x)))
        return hidden, self.fc3(F.relu(hidden))


def test_step_reduces_gradients_that_only_some_ranks_computed():
    """Rank 0's loss does not use fc3: its fc3 gradients are None, the other ranks' are not.
    step() must still allreduce every gradient (zeros for the missing ones), not hang."""
    for cls in every_torch_optimizer():
        torch.manual_seed(5)
        model = TwoHeads()
        optimizer = hvd.DistributedOptimizer(construct(cls, model, dict(lr=0.2)),
                                             named_parameters=model.named_parameters())
        x, y = torch.ones(N, D_IN), torch.zeros(N, D_OUT)
        first, second = model(x)
        optimizer.zero_grad()
        F.mse_loss(first if hvd.rank() == 0 else second, y, reduction="sum").backward()
        optimizer.step()
        assert_equal_on_every_rank(sorted(model.state_dict().items()))


def test_duplicate_parameter_names_are_refused():
    a, b = torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1)
    optimizer = torch.optim.SGD(itertools.chain(a.parameters(), b.parameters()), lr=0.1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(optimizer, named_parameters=itertools.chain(a.named_parameters(),
                                                                              b.named_parameters()))


def test_named_parameters_must_cover_the_optimizers_parameters():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 1), torch.nn.Conv2d(4, 1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(optimizer, named_parameters=list(model.named_parameters())[:1])


def test_without_named_parameters_every_parameter_gets_a_distinct_name():
    model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 10))
    plain = copy.deepcopy(model)  # its gradients are this rank's own: no hook reduces them
    optimizer = torch.optim.SGD([{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.1)
    optimizer = hvd.DistributedOptimizer(optimizer)
    torch.manual_seed(hvd.rank())
    x = torch.randn(4, 10)
    plain(x).sum().backward()
    # Not model's gradients after backward(): the hooks reduce them in place from inside it.
    expected = hvd.allgather_object([p.grad.numpy().copy() for p in plain.parameters()])
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()  # reduces; the reduced gradients are the mean of every rank's
    for i, p in enumerate(model.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), np.mean([e[i] for e in expected], axis=0), rtol=1e-5)


def test_gradients_can_be_switched_off_and_on_between_steps():
    torch.manual_seed(3)
    gen, disc = torch.nn.Conv2d(1, 4, 1), torch.nn.Conv2d(4, 1, 1)
    hvd.broadcast_parameters(gen.state_dict(), root_rank=0)
    hvd.broadcast_parameters(disc.state_dict(), root_rank=0)
    gen_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1), named_parameters=gen.named_parameters())
    disc_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                        named_parameters=disc.named_parameters())
    x = torch.rand(1, 1, 8, 8)
    wrong = []  # steps where a gradient was present that should not be, or missing
    for _ in range(3):
        for train_gen in (True, False):
            for p in gen.parameters():
                p.requires_grad_(train_gen)
            for p in disc.parameters():
                p.requires_grad_(not train_gen)
            gen_opt.zero_grad()
            disc_opt.zero_grad()
            disc(gen(x)).sum().backward()
            trained = [p.grad is not None and bool(p.grad.abs().max() > 0) for p in gen.parameters()]
            trained += [not (p.grad is not None and bool(p.grad.abs().max() > 0)) for p in disc.parameters()]
            wrong += [train_gen] * trained.count(not train_gen)
            (gen_opt if train_gen else disc_opt).step()
    assert_equal_on_every_rank(sorted(gen.state_dict().items()) + sorted(disc.state_dict().items()))
    assert not wrong


def test_gradient_clipping_between_synchronize_and_step():
    model = torch.nn.Linear(1, 1)
    model.weight = torch.nn.Parameter(torch.full((1, 1), 0.5))
    model.bias = torch.nn.Parameter(torch.zeros(1))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    x = torch.full((1, 1), float(hvd.rank() + 1))
    optimizer.zero_grad()
    F.mse_loss(model(x), torch.ones(1, 1)).backward()
    optimizer.synchronize()
    # d/dw (w*x - 1)^2 = 2 (w x - 1) x, averaged over the ranks' x = r + 1.
    xs = np.arange(1, hvd.size() + 1, dtype=np.float64)
    np.testing.assert_allclose(model.weight.grad.item(), np.mean(2 * (0.5 * xs - 1) * xs), rtol=1e-6)
    before = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert abs(model.weight.grad.item()) < abs(before)
    clipped = model.weight.grad.item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "step() without skip_synchronize()" warning here
        with optimizer.skip_synchronize():
            optimizer.step()
    np.testing.assert_allclose(model.weight.item(), 0.5 - 0.1 * clipped, rtol=1e-6)


def test_sync_batch_norm_equals_batch_norm_over_the_whole_batch():
    size, rank = hvd.size(), hvd.rank()
    batches = [torch.tensor([[r, r + 1], [r * 2, r * 2 + 1], [r * 3, r * 3 + 1], [r * 4, r * 4 + 1]],
                            dtype=torch.float32) for r in range(size)]
    full = torch.stack(batches)  # (size, 4 features, 2)
    sync_bn, bn = hvd.SyncBatchNorm(num_features=4), torch.nn.BatchNorm1d(num_features=4)
    mine = full[rank].unsqueeze(0).clone().requires_grad_()
    everything = full.clone().requires_grad_()
    out_sync, out_ref = sync_bn(mine), bn(everything)
    out_sync.sum().backward()
    out_ref.mean(dim=0).sum().backward()
    weight_grad = hvd.allreduce(sync_bn.weight.grad, name="sbn.weight.grad")
    bias_grad = hvd.allreduce(sync_bn.bias.grad, name="sbn.bias.grad")
    input_grad = hvd.allreduce(mine.grad, name="sbn.input.grad")
    close = dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_sync, out_ref[rank].unsqueeze(0), **close)
    torch.testing.assert_close(sync_bn.running_mean, bn.running_mean, **close)
    torch.testing.assert_close(sync_bn.running_var, bn.running_var, **close)
    torch.testing.assert_close(weight_grad, bn.weight.grad, **close)
    torch.testing.assert_close(bias_grad, bn.bias.grad, **close)
    torch.testing.assert_close(input_grad, everything.grad[rank].unsqueeze(0), **close)


def test_shutdown_then_init_keeps_rank_and_size():
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    torch.set_num_threads(1)
    assert hvd.is_initialized() and (hvd.rank(), hvd.size()) == (rank, size)
    np.testing.assert_array_equal(hvd.allreduce(torch.ones(3), op=hvd.Sum).numpy(), np.full(3, size))
