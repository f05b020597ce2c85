"""Sparse gradients: sparse_allreduce_async (Horovod's allgather of indices and values) and
DistributedOptimizer on a model with nn.Embedding(sparse=True), with and without
sparse_as_dense, against numpy and a single-process reference."""

import numpy as np
import pytest
import torch

import hora.torch as hvd


def sparse_input(d, shape, seed):
    """Rank d's tensor: dense values with about 70% zeros, as a numpy array."""
    rs = np.random.RandomState(100 * seed + d)
    values = rs.uniform(-1, 1, size=shape)
    values[rs.uniform(size=shape) < 0.7] = 0.0
    return values


@pytest.mark.parametrize("op", [hvd.Average, hvd.Sum])
@pytest.mark.parametrize("shape", [(7,), (9, 4), (5, 3, 2)])
def test_sparse_allreduce_async_equals_the_dense_reduction(op, shape):
    n, r = hvd.size(), hvd.rank()
    tensor = torch.tensor(sparse_input(r, shape, 1)).to_sparse()
    wait = hvd.sparse_allreduce_async(tensor, name=f"sparse.{op}.{len(shape)}", op=op)
    assert callable(wait)
    result = wait()
    assert result.is_sparse and result.shape == tensor.shape
    total = sum(sparse_input(d, shape, 1) for d in range(n))
    want = total / n if op == hvd.Average else total
    np.testing.assert_allclose(result.to_dense().numpy(), want, rtol=1e-12, atol=1e-12)


def test_sparse_allreduce_async_within_a_process_set():
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("process sets need 2 ranks")
    even = hvd.add_process_set(list(range(0, n, 2)))
    odd = hvd.add_process_set(list(range(1, n, 2)))
    try:
        mine = even if r % 2 == 0 else odd
        tensor = torch.tensor(sparse_input(r, (6, 3), 2)).to_sparse()
        result = hvd.sparse_allreduce_async(tensor, "sparse.set", hvd.Average, process_set=mine)()
        want = sum(sparse_input(d, (6, 3), 2) for d in mine.ranks) / len(mine.ranks)
        np.testing.assert_allclose(result.to_dense().numpy(), want, rtol=1e-12, atol=1e-12)
    finally:
        hvd.remove_process_set(odd)
        hvd.remove_process_set(even)


def lookups(d, step):
    """Rank d's embedding indices (repeats included) and upstream weights at a step."""
    rs = np.random.RandomState(1000 * step + d)
    return torch.tensor(rs.randint(0, 10, size=(2, 3 + d))), torch.tensor(rs.uniform(-1, 1, size=(2, 3 + d, 4)),
                                                                        dtype=torch.float32)


def embedding():
    torch.manual_seed(7)
    return torch.nn.Embedding(10, 4, sparse=True)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("optimizer_class,kwargs", [(torch.optim.SGD, {"lr": 0.5}),
                                                    (torch.optim.SparseAdam, {"lr": 0.1})])
def test_sparse_embedding_trains_as_on_the_whole_batch(sparse_as_dense, optimizer_class, kwargs):
    n, r = hvd.size(), hvd.rank()
    model, reference = embedding(), embedding()
    opt = hvd.DistributedOptimizer(optimizer_class(list(model.parameters()), **kwargs),
                                   named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
    ref_opt = optimizer_class(list(reference.parameters()), **kwargs)
    for step in range(3):
        idx, up = lookups(r, step)
        opt.zero_grad()
        (model(idx) * up).sum().backward()
        assert model.weight.grad.is_sparse
        opt.step()
        # The reference: the mean over ranks of every rank's loss, in one process.
        ref_opt.zero_grad()
        (sum((reference(i) * u).sum() for i, u in (lookups(d, step) for d in range(n))) / n).backward()
        ref_opt.step()
    np.testing.assert_allclose(model.weight.detach().numpy(), reference.weight.detach().numpy(),
                               rtol=1e-5, atol=1e-6)
