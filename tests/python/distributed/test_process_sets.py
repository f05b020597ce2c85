"""Process sets as Horovod numbers them: ranks, membership, roots given as GLOBAL ranks, the
values add/remove_process_set and init(process_sets=) return, and what collectives and
DistributedOptimizer do on a rank that is not a member. Layout as Horovod's tests: the even and
the odd ranks (at 2 ranks: [0] and [1]; at 3: [0, 2] and [1])."""

import numpy as np
import pytest
import torch

import hora.torch as hvd


@pytest.fixture
def even_odd():
    if hvd.size() < 2:
        pytest.skip("process sets need 2 ranks")
    n = hvd.size()
    even = hvd.add_process_set([k for k in range(n) if k % 2 == 0])
    odd = hvd.add_process_set(hvd.ProcessSet([k for k in range(n) if k % 2 == 1]))
    yield even, odd
    hvd.remove_process_set(odd)
    hvd.remove_process_set(even)


@pytest.fixture
def without_last():
    """A set of every rank but the last: the last rank is not a member."""
    if hvd.size() < 2:
        pytest.skip("process sets need 2 ranks")
    ps = hvd.add_process_set(list(range(hvd.size() - 1)))
    yield ps
    hvd.remove_process_set(ps)


def mine(even, odd):
    return even if hvd.rank() % 2 == 0 else odd


def test_rank_size_included_and_ranks(even_odd):
    even, odd = even_odd
    n, r = hvd.size(), hvd.rank()
    assert even.ranks == list(range(0, n, 2)) and odd.ranks == list(range(1, n, 2))
    assert even.size() == len(even.ranks) and odd.size() == len(odd.ranks)
    this, other = mine(even, odd), (odd if r % 2 == 0 else even)
    assert this.included() is True and other.included() is False
    assert this.rank() == this.ranks.index(r)
    with pytest.raises(ValueError):
        other.rank()  # Horovod: "not part of provided process set"
    assert hvd.global_process_set.ranks == list(range(n)) and hvd.global_process_set.rank() == r
    assert hvd.global_process_set.size() == n and hvd.global_process_set.process_set_id == 0


def test_add_and_remove_return_values():
    if hvd.size() < 2:
        pytest.skip("process sets need 2 ranks")
    assert hvd.ProcessSet([1, 0]).ranks == [0, 1]
    ps = hvd.ProcessSet([hvd.size() - 1])
    assert ps.process_set_id is None and ps.size() is None and ps.rank() is None
    assert hvd.add_process_set(ps) is ps and ps.process_set_id not in (None, 0)
    try:
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set([hvd.size() - 1])  # the same ranks again
    finally:
        assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None and ps.size() is None and ps.rank() is None
    assert hvd.remove_process_set(ps) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    with pytest.raises(ValueError, match="duplicate"):
        hvd.add_process_set(list(range(hvd.size())))  # the global set's ranks
    with pytest.raises(ValueError):
        hvd.ProcessSet(["a"])


def test_init_registers_the_process_sets_it_is_given():
    if hvd.size() < 2:
        pytest.skip("process sets need 2 ranks")
    first, second = hvd.ProcessSet([0]), hvd.ProcessSet([1])
    assert hvd.init(process_sets=[first, second]) is None
    try:
        assert first.process_set_id is not None and second.process_set_id not in (None, first.process_set_id)
        if hvd.rank() < 2:
            out = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum, process_set=(first, second)[hvd.rank()])
            assert out.item() == hvd.rank() + 1.0
        with pytest.raises(ValueError):
            hvd.init(process_sets=[hvd.ProcessSet([0])])  # a duplicate of `first`
    finally:
        hvd.remove_process_set(second)
        hvd.remove_process_set(first)
    assert hvd.init(process_sets="dynamic") is None


def test_broadcast_roots_are_global_ranks(even_odd):
    even, odd = even_odd
    r = hvd.rank()
    this = mine(even, odd)
    for root in this.ranks:
        for dim in (1, 2, 3):
            out = hvd.broadcast(torch.full((5,) * dim, float(r)), root, process_set=this)
            np.testing.assert_array_equal(out.numpy(), np.full((5,) * dim, float(root)))
            inplace = torch.full((2,) * dim, r, dtype=torch.int32)
            hvd.broadcast_(inplace, root, process_set=this)
            np.testing.assert_array_equal(inplace.numpy(), np.full((2,) * dim, root))
    outsider = (odd if r % 2 == 0 else even).ranks[0]
    with pytest.raises(ValueError):
        hvd.broadcast(torch.ones(2), outsider, process_set=this)


def test_broadcast_object_and_parameters_with_a_process_set(even_odd):
    even, odd = even_odd
    r = hvd.rank()
    this = mine(even, odd)
    root = this.ranks[-1]
    got = hvd.broadcast_object({"from": r} if r == root else None, root_rank=root, process_set=this)
    assert got == {"from": root}
    params = {"w": torch.full((3,), float(r))}
    hvd.broadcast_parameters(params, root_rank=root, process_set=this)
    np.testing.assert_array_equal(params["w"].numpy(), np.full(3, float(root)))
    plain = [torch.full((2,), float(r))]  # model.parameters() style: tensors without names
    hvd.broadcast_parameters(plain, root_rank=0)
    np.testing.assert_array_equal(plain[0].numpy(), np.zeros(2))


def test_collectives_on_a_rank_outside_the_set_raise_value_error(without_last):
    ps, n, r = without_last, hvd.size(), hvd.rank()
    calls = [
        lambda: hvd.allreduce(torch.ones(2), process_set=ps),
        lambda: hvd.allgather(torch.ones(2), process_set=ps),
        lambda: hvd.broadcast(torch.ones(2), 0, process_set=ps),
        lambda: hvd.alltoall(torch.ones(ps.size()), process_set=ps),
        lambda: hvd.reducescatter(torch.ones(ps.size()), process_set=ps),
        lambda: hvd.grouped_allreduce([torch.ones(2)], process_set=ps),
        lambda: hvd.grouped_reducescatter([torch.ones(ps.size())], process_set=ps),
    ]
    if r == n - 1:
        for call in calls:
            with pytest.raises(ValueError):
                call()
    else:
        for call in calls:
            call()


def test_optimizer_on_members_and_on_a_rank_outside(without_last):
    """Members average their gradients; the rank outside trains on its own (Horovod's
    test_optimizer_process_sets), and neither waits for the other."""
    ps, r = without_last, hvd.rank()
    weight = torch.nn.Parameter(torch.zeros(4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([weight], lr=1.0), named_parameters=[("w", weight)],
                                   process_set=ps)
    (weight * torch.arange(1.0, 5.0) * (r + 1)).sum().backward()
    opt.step()
    scale = np.mean([s + 1 for s in ps.ranks]) if r in ps.ranks else r + 1
    np.testing.assert_allclose(weight.detach().numpy(), -np.arange(1.0, 5.0) * scale)


def test_barrier_within_a_set(even_odd):
    even, odd = even_odd
    hvd.barrier(process_set=mine(even, odd))
    hvd.barrier()
