"""hora.ray.RayExecutor on a real Ray cluster (conftest.py): results against numpy in rank
order, execute/execute_single/run_remote, a rank's exception, a killed actor, infeasible
placements, training. Every failure must reach the driver within seconds, naming the rank."""

import os
import sys
import time

import numpy
import pytest

import runner_jobs
from hora.ray import RayExecutor
from hora.runner import RunError

FAILURE_DEADLINE_S = 10.0


def _executor(**kwargs):
    settings = RayExecutor.create_settings(timeout_s=30, placement_group_timeout_s=kwargs.pop("pg_timeout", 30))
    return RayExecutor(settings, **kwargs)


@pytest.fixture
def executor(ray_cluster):
    ex = _executor(num_workers=2)
    ex.start()
    yield ex
    ex.shutdown()


def _allreduce(scale):
    import hora.torch as hvd
    import torch

    hvd.init()
    data = numpy.arange(10, dtype=numpy.float32) * (hvd.rank() + 1) * scale
    total = hvd.allreduce(torch.from_numpy(data), op=hvd.Sum).numpy()
    return hvd.rank(), hvd.size(), hvd.local_rank(), total


def test_run_returns_results_in_rank_order_and_repeats(executor):
    for scale in (1.0, 3.0):  # a second run reuses the actors, hora still initialised
        results = executor.run(_allreduce, args=[scale])
        want = sum(numpy.arange(10, dtype=numpy.float32) * (r + 1) * scale for r in range(2))
        for rank, (r, size, local_rank, total) in enumerate(results):
            assert (r, size, local_rank) == (rank, 2, rank)
            numpy.testing.assert_array_equal(total, want)


class Counter:
    def __init__(self, start):
        self.value = start

    def bump(self):
        self.value += 1
        return self.value


def test_execute_execute_single_and_run_remote(ray_cluster):
    ex = _executor(num_workers=2)
    ex.start(executable_cls=Counter, executable_kwargs={"start": 10}, extra_env_vars={"GREETING": "hi"})
    try:
        assert ex.execute(lambda c: c.bump()) == [11, 11]
        assert ex.execute_single(lambda c: c.bump()) == 12
        assert ex.execute(lambda c: c.value) == [12, 11]
        refs = ex.run_remote(lambda: (os.environ["GREETING"], os.environ["HORA_RANK"]))
        assert ray_cluster.get(refs) == [("hi", "0"), ("hi", "1")]
    finally:
        ex.shutdown()


def _raise_on_rank_one():
    import hora.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad shard 3")
    hvd.allreduce(torch.ones(3))  # rank 0 waits for rank 1, which left: it fails, not hangs


def test_an_exception_is_raised_with_its_rank_and_traceback(executor):
    with pytest.raises(RunError) as info:
        executor.run(_raise_on_rank_one)
    e = info.value
    assert e.rank == 1
    assert str(e).startswith("rank 1 raised ValueError: bad shard 3")
    assert "in _raise_on_rank_one" in e.remote_traceback
    assert isinstance(e.__cause__, ValueError)
    with pytest.raises(RuntimeError, match="not started"):  # a failed run shut the executor down
        executor.run(lambda: 0)


def _log_five(scale):
    import hora.torch as hvd
    from hora.ray import ray_logger

    hvd.init()
    for i in range(5):
        ray_logger.log({"rank": hvd.rank(), "i": i * scale})
    return hvd.rank()


def test_callbacks_get_every_item_the_workers_log_in_order(executor):
    got, also = [], []
    assert executor.run(_log_five, args=[10], callbacks=[got.append, also.append]) == [0, 1]
    assert got == also
    for rank in (0, 1):
        assert [item["i"] for item in got if item["rank"] == rank] == [0, 10, 20, 30, 40]
    assert len(got) == 10

    def broken(item):
        raise KeyError(f"callback broke on {item['i']}")

    got.clear()
    with pytest.raises(KeyError, match="callback broke on 0"):  # raised once the job has ended
        executor.run(_log_five, args=[1], callbacks=[broken, got.append])
    assert len(got) == 10  # the other callbacks had every item
    assert executor.run(lambda: 7) == [7, 7]  # the run ended well: the executor goes on


def test_a_killed_actor_fails_the_run_within_seconds_naming_it(executor):
    e, elapsed = runner_jobs.run_and_kill(lambda fn, pid_dir: executor.run(fn, args=[pid_dir]))
    print(f"\nhora.ray: actor killed -> RunError in {elapsed:.2f} s", file=sys.stderr)
    assert isinstance(e, RunError), e
    assert elapsed < FAILURE_DEADLINE_S
    assert e.rank == 1
    host = executor_host()
    assert str(e).startswith(f"rank 1 on node {host} lost its Ray actor"), str(e)


def executor_host():
    import ray

    return ray.util.get_node_ip_address()


def test_an_infeasible_placement_is_a_timeout(ray_cluster):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="could not place 3 bundles"):
        _executor(num_workers=3, pg_timeout=2).start()  # 3 CPUs on a 2-CPU cluster
    with pytest.raises(TimeoutError, match="STRICT_SPREAD"):
        _executor(num_hosts=2, num_workers_per_host=1, pg_timeout=2).start()  # one node only
    assert time.monotonic() - start < 4 + FAILURE_DEADLINE_S
    assert ray_cluster.available_resources().get("CPU") == 2  # nothing left reserved


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="not both"):
        _executor(min_workers=1, max_workers=2, num_workers=2)
    with pytest.raises(ValueError, match="positive min_workers"):
        _executor(max_workers=2)
    with pytest.raises(ValueError, match="below min_workers"):
        _executor(min_workers=3, max_workers=2)
    with pytest.raises(ValueError, match="either num_workers"):
        _executor()
    with pytest.raises(ValueError, match="gpus_per_worker"):
        _executor(num_workers=1, gpus_per_worker=1)


def test_training_through_ray_matches_the_single_process_reference(executor):
    runner_jobs.check(executor.run(runner_jobs.train))
