"""hora.run end to end: real workers started by horarun, results in rank order, exceptions
raised in the caller with the worker's rank and traceback."""

import os
import sys

import numpy
import pytest

import hora


def test_results_come_back_in_rank_order():
    assert hora.run(lambda: int(os.environ["HORA_RANK"]) * 10, np=3) == [0, 10, 20]


def test_arguments_closures_and_environment():
    base = 7  # captured by the closure: cloudpickle carries it

    def work(x, scale=1):
        return (base + x) * scale, int(os.environ["HORA_SIZE"]), os.environ["GREETING"]

    assert hora.run(work, args=(3,), kwargs={"scale": 2}, np=2, env={"GREETING": "hi"}) == [(20, 2, "hi")] * 2


def test_large_payload_and_large_results():
    table = numpy.arange(100_000, dtype=numpy.float64)  # ~800 KB pickled: passed through a file

    def work():
        rank = int(os.environ["HORA_RANK"])
        return table * (rank + 1)

    results = hora.run(work, np=2)
    numpy.testing.assert_array_equal(results[0], table)
    numpy.testing.assert_array_equal(results[1], table * 2)


def test_output_is_forwarded_and_unterminated_output_is_kept(capfd):
    def work():
        print("hello from", os.environ["HORA_RANK"])
        sys.stdout.write("no newline")
        return 1

    assert hora.run(work, np=2) == [1, 1]
    out = capfd.readouterr().out
    assert "[0]<stdout>:hello from 0" in out and "[1]<stdout>:hello from 1" in out
    assert "[1]<stdout>:no newline" in out


class CustomError(Exception):
    pass


def test_an_exception_is_raised_with_rank_and_traceback():
    def work():
        if os.environ["HORA_RANK"] == "1":
            raise CustomError("bad shard 17")
        import time
        time.sleep(30)  # stopped by horarun when rank 1 fails

    with pytest.raises(hora.RunError) as info:
        hora.run(work, np=3)
    err = info.value
    assert err.rank == 1
    assert "rank 1 raised CustomError: bad shard 17" in str(err)
    assert "in work" in err.remote_traceback
    assert isinstance(err.__cause__, CustomError)


def test_a_worker_that_exits_is_reported():
    def work():
        if os.environ["HORA_RANK"] == "0":
            sys.exit(3)
        return 1

    with pytest.raises(hora.RunError) as info:
        hora.run(work, np=2)
    assert info.value.rank == 0
    assert "SystemExit" in str(info.value)


def test_np_must_be_positive():
    with pytest.raises(ValueError):
        hora.run(lambda: 0, np=0)


def _collective_job(failure):
    """Rank 1 fails after a first allreduce while rank 0 waits in the next one."""
    def job():
        import os as _os
        import torch
        import hora.torch as hvd
        hvd.init()
        hvd.allreduce(torch.ones(2), name="warm")
        if hvd.rank() == 1:
            if failure == "raise":
                raise ValueError("bad shard 3")
            _os._exit(9)
        hvd.allreduce(torch.ones(2), name="never.on.rank.1")
    return job


def test_the_rank_whose_function_raised_leads_and_the_others_follow():
    with pytest.raises(hora.RunError) as info:
        hora.run(_collective_job("raise"), np=2)
    err = info.value
    assert err.rank == 1
    assert str(err).startswith("rank 1 raised ValueError: bad shard 3"), str(err)
    assert "in job" in err.remote_traceback
    assert isinstance(err.__cause__, ValueError)
    # Rank 0's error is a consequence: it comes after, naming rank 1 and its exception (unless
    # horarun stopped rank 0 before it could report).
    consequence = ("rank 0 raised ShutdownError: hora has shut down: rank 1 is exiting: its hora.run function "
                   "raised ValueError: bad shard 3")
    assert consequence in str(err) or "rank 0 returned no result" in str(err), str(err)


def test_a_rank_that_exits_without_reporting_leads():
    with pytest.raises(hora.RunError) as info:
        hora.run(_collective_job("exit"), np=2)
    err = info.value
    assert err.rank == 1
    assert str(err).startswith("rank 1 exited with code 9 before returning a result"), str(err)


def _elastic_job(failure):
    """Trains a one-weight model for 8 committed steps under hvd.elastic.run; the worker on host
    127.0.0.2 fails (`failure`: "kill" or "raise") at step 3 of the first generation."""
    def job():
        import os as _os
        import signal as _signal
        import torch
        import hora.torch as hvd
        hvd.init()
        model = torch.nn.Linear(4, 1)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)

        @hvd.elastic.run
        def train(state):
            while state.step < 8:
                if state.step == 3 and _os.environ["HORA_ELASTIC_WORKER_ID"].startswith("127.0.0.2"):
                    if failure == "kill":
                        _os.kill(_os.getpid(), _signal.SIGKILL)
                    raise ValueError("bad shard 3")
                opt.zero_grad()
                model(torch.ones(2, 4)).sum().backward()
                opt.step()
                state.step += 1
                state.commit()
            return hvd.rank(), hvd.size(), state.step

        return train(state)
    return job


def test_an_elastic_run_goes_on_without_a_killed_worker_and_returns_the_last_generations_results(monkeypatch):
    monkeypatch.setenv("HORA_ELASTIC_JOIN_WINDOW_SECONDS", "3")
    results = hora.run(_elastic_job("kill"), np=2, hosts="127.0.0.1:1,127.0.0.2:1", min_np=1, max_np=2)
    assert results == [(0, 1, 8)]


def test_an_elastic_run_without_failures_returns_every_rank_in_order():
    results = hora.run(_elastic_job("none"), np=2, hosts="localhost:2", min_np=1, max_np=2)
    assert results == [(0, 2, 8), (1, 2, 8)]


def test_an_elastic_run_that_cannot_go_on_raises_the_root_cause():
    with pytest.raises(hora.RunError) as info:  # min_np 2: the job cannot go on with one worker
        hora.run(_elastic_job("raise"), np=2, hosts="127.0.0.1:1,127.0.0.2:1", min_np=2, max_np=2,
                 elastic_timeout=5)
    assert "raised ValueError: bad shard 3" in str(info.value), str(info.value)
