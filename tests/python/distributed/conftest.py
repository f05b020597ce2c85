"""Tests run on every rank of a job: `horarun -np N python -m pytest tests/python/distributed`
(scripts/test.sh runs N = 2 and 3; a plain pytest run is a job of one). Every test calls the
same collectives in the same order on every rank; a rank that fails an assertion still returns
from the test, so the ranks stay in step."""

import pytest
import torch

import hora.torch as hvd


@pytest.fixture(scope="session", autouse=True)
def hora_job():
    hvd.init()
    torch.set_num_threads(1)
    yield
    hvd.shutdown()


def per_rank(r, shape, dtype, seed=0):
    """Rank r's deterministic input: any rank can recompute every other rank's."""
    g = torch.Generator().manual_seed(1000 * seed + r)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 10 - 5).to(dtype)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=g, dtype=torch.int64).to(dtype)
