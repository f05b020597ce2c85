"""hvd.elastic.run's reset loop on every rank of a real job (started by plain horarun, where a
reset re-forms the same ranks): a collective failure restores the last commit and runs the
function again; a host change keeps the state; after either, every rank holds identical state."""

import torch

import hora.torch as hvd


def make_state():
    torch.manual_seed(100 + hvd.rank())  # different initial weights on every rank: sync must fix them
    model = torch.nn.Linear(3, 2)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=[(f"elastic_run.{n}", p) for n, p in model.named_parameters()])
    return hvd.elastic.TorchState(model, optimizer, step=0), model, optimizer


def train_step(model, optimizer):
    optimizer.zero_grad()
    model(torch.ones(4, 3) * (hvd.rank() + 1)).sum().backward()
    optimizer.step()


def identical_on_every_rank(model, optimizer):
    flat = torch.cat([p.detach().flatten() for p in model.parameters()] +
                     [s["momentum_buffer"].flatten() for s in optimizer.state.values()])
    low = hvd.allreduce(flat, op=hvd.Min, name="elastic_run.min")
    high = hvd.allreduce(flat, op=hvd.Max, name="elastic_run.max")
    return torch.equal(low, high)


def test_a_failure_restores_the_last_commit_and_runs_again_in_step():
    state, model, optimizer = make_state()
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        while state.step < 6:
            train_step(model, optimizer)
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
            if state.step == 5 and len(calls) == 1:
                raise hvd.HoraInternalError("a peer was lost (raised by the test on every rank)")
        return state.step

    assert train(state) == 6
    assert calls == [0, 4], calls  # the second call starts from the commit at step 4, not step 5
    assert resets == [hvd.size()]
    assert identical_on_every_rank(model, optimizer)


def test_a_host_change_resets_without_restoring():
    state, model, optimizer = make_state()
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.step)
        while state.step < 4:
            train_step(model, optimizer)
            state.step += 1
            if state.step == 3 and len(calls) == 1:
                state.save()  # what commit() does before it finds the driver's announcement
                raise hvd.elastic.HostsUpdatedInterrupt(skip_sync=False)
        return state.step

    assert train(state) == 4
    assert calls == [0, 3], calls  # went on from step 3, where the interrupt came
    assert identical_on_every_rank(model, optimizer)
