"""hvd.elastic's state and sampler in one process: commit and restore are exact, and the sampler
re-shards the rest of an epoch over a new number of ranks so that every sample is seen once."""

import collections

import pytest
import torch

import hora.torch as hvd
from hora.torch.elastic import sampler as sampler_module


@pytest.fixture(scope="module", autouse=True)
def job_of_one():
    hvd.init()
    yield
    hvd.shutdown()


def test_restore_brings_back_the_committed_model_optimizer_and_attributes_bit_for_bit():
    model = torch.nn.Linear(5, 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(2, 5)).sum().backward()
    optimizer.step()
    state = hvd.elastic.TorchState(model, optimizer, epoch=2, history=[1, 2])
    state.commit()
    committed_params = [p.detach().clone() for p in model.parameters()]
    committed_moments = [s["exp_avg"].clone() for s in optimizer.state.values()]
    model(torch.randn(2, 5)).sum().backward()
    optimizer.step()
    state.epoch = 7
    state.history.append(3)
    state.restore()
    assert all(torch.equal(a, b) for a, b in zip(committed_params, model.parameters()))
    assert all(torch.equal(a, s["exp_avg"]) for a, s in zip(committed_moments, optimizer.state.values()))
    assert state.epoch == 2 and state.history == [1, 2]


def shards(dataset, ranks, state_dict, monkeypatch):
    """Each of `ranks` ranks' sampler, loaded from `state_dict`."""
    out = []
    for r in range(ranks):
        monkeypatch.setattr(sampler_module, "size", lambda: ranks)
        monkeypatch.setattr(sampler_module, "rank", lambda r=r: r)
        s = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
        s.load_state_dict(state_dict)
        out.append(s)
    return out


def test_the_sampler_reshards_the_rest_of_the_epoch_and_every_sample_is_seen_once(monkeypatch):
    dataset, batch = list(range(120)), 4
    seen = collections.Counter()
    samplers = shards(dataset, 3, {"epoch": 5, "processed_num": 0}, monkeypatch)
    iterators = [iter(s) for s in samplers]
    for i in range(3):  # three steps on three ranks, then a rank is lost
        for s, it in zip(samplers, iterators):
            seen.update(next(it) for _ in range(batch))
            s.record_batch(i, batch)
    committed = samplers[0].state_dict()
    assert committed == {"epoch": 5, "processed_num": 36}
    for s in shards(dataset, 2, committed, monkeypatch):
        assert len(s) == 42
        seen.update(iter(s))
    assert sorted(seen) == dataset and set(seen.values()) == {1}
    # The next epoch is another permutation of every sample.
    samplers[0].set_epoch(6)
    assert samplers[0].state_dict() == {"epoch": 6, "processed_num": 0}
