"""hora.spark.run_elastic on a real standalone Spark cluster whose two workers are hosts of their
own (conftest.py's spark_hosts: 127.0.0.2 and 127.0.0.3, one core each): the elastic job trains
(elastic_jobs.py: hora.torch's elastic loop checked against a numpy replay of its committed
steps), survives the SIGKILL of a rank's Spark task at the smaller size from its last commit,
fails with a RunError naming the worker when fewer than min_num_proc remain, and re-raises a
rank's exception with its traceback. Nothing of a run may be left running after it."""

import io
import logging
import os
import re
import signal
import sys
import time
import uuid

import numpy
import pytest

import elastic_jobs as jobs
from elastic_jobs import COMMIT_EVERY
from hora.runner import RunError
from runner_jobs import _alive

# Every run is bounded by elastic_jobs.RUN_DEADLINE_S (RunInThread), every other wait by its own
# deadline. How long a run's rank processes may outlive its return or failure.
GONE_WITHIN_S = 10.0


class _Elastic:
    """hora.spark.run_elastic with fixed arguments, as elastic_jobs.RunInThread's executor."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def run(self, fn, args):
        import hora.spark

        return hora.spark.run_elastic(fn, args=args, **self.kwargs)


def _marked_processes(marker):
    """The pids of the processes whose environment holds ``marker`` (the runs' ranks get it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read() and _alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            pass  # gone meanwhile, or not ours to read
    return found


def _assert_none_left(marker):
    deadline = time.monotonic() + GONE_WITHIN_S
    while _marked_processes(marker):
        assert time.monotonic() < deadline, \
            f"rank processes {_marked_processes(marker)} still run {GONE_WITHIN_S} s after the run ended"
        time.sleep(0.1)


def _marker_env():
    return {"HORA_TEST_MARKER": f"spark-elastic-{uuid.uuid4().hex}"}


def _ranked_train(progress_dir, done_when):
    """elastic_jobs.train, with the rank and size of the last generation and the processes of
    this machine (the whole cluster) whose command line holds the job's secret."""
    import hora.torch as hvd

    result = jobs.train(progress_dir, done_when)
    print(f"rank {hvd.rank()} done")
    return hvd.rank(), hvd.size(), result, _command_lines_with(os.environ["HORA_SECRET"])


def _command_lines_with(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass  # gone meanwhile
    return found


def test_a_two_rank_elastic_job_trains_and_returns_in_rank_order(spark_hosts, tmp_path):
    env = _marker_env()
    out = io.StringIO()
    executor = _Elastic(num_proc=2, min_num_proc=1, start_timeout=120, elastic_timeout=60, env=env, stdout=out)
    job = jobs.RunInThread(executor, _ranked_train, (str(tmp_path), lambda log: len(log) >= 3 * COMMIT_EVERY))
    results = job.result()
    assert [(r, n) for r, n, _, _ in results] == [(0, 2), (1, 2)]
    for _, _, (weights, log, _, _), secret_seen_in in results:
        assert secret_seen_in == []  # horarun, the proxies, the tasks and ranks alike
        jobs.check_training(weights, log)
        numpy.testing.assert_array_equal(weights, results[0][2][0])
        assert [n for _, n in log] == [2] * (3 * COMMIT_EVERY)
    assert results[0][2][3] != results[1][2][3]  # two processes
    assert "[0]<stdout>:rank 0 done\n" in out.getvalue() and "[1]<stdout>:rank 1 done\n" in out.getvalue()
    _assert_none_left(env["HORA_TEST_MARKER"])


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []
        self.times = []  # time.time() of each line

    def emit(self, record):
        self.times.append(record.created)
        self.lines.append(record.getMessage())


def test_a_killed_task_shrinks_the_job_which_resumes_from_the_last_commit(spark_hosts, tmp_path):
    """SIGKILL of rank 1's Spark task (its Python worker; the rank's process dies with it): the
    job goes on at 1 rank from the last commit; Spark retries the task, whose new attempt
    registers, but its host stays blacklisted (horarun's rule for a failed host, without a
    cooldown), so the job ends at 1 rank."""
    logger = logging.getLogger("hora.spark")
    lines, level = _Lines(), logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        _kill_rank_one_task(tmp_path, lines)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def _kill_rank_one_task(tmp_path, lines):
    env = _marker_env()
    retried = tmp_path / "retried"  # the training ends once the test saw the retry register
    executor = _Elastic(num_proc=2, min_num_proc=1, start_timeout=120, elastic_timeout=60, env=env)
    shrank = jobs.shrank_from(2)
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), lambda log: shrank(log) and retried.exists()))
    killed_after = jobs.wait_progress(job, str(tmp_path), 2, 2 * COMMIT_EVERY, between_commits=True)
    with open(tmp_path / "pid.1") as f:
        rank_pid = int(f.read())
    task_pid = _parent(rank_pid)
    os.kill(task_pid, signal.SIGKILL)
    killed_at, killed_when = time.monotonic(), time.time()
    jobs.wait_progress(job, str(tmp_path), 1, 0)
    print(f"\nhora.spark elastic: Spark task killed -> a step at 1 rank after {time.monotonic() - killed_at:.2f} s",
          file=sys.stderr)
    retry, registered_when = _wait_for_line(job, lines, r"Spark task \d+ \(attempt 1\) registered from (127\.0\.0\.\d+)")
    print(f"hora.spark elastic: the retried task registered {registered_when - killed_when:.2f} s after the kill",
          file=sys.stderr)
    retried.touch()
    results = job.result()
    assert len(results) == 1
    weights, log, ran, pid = results[0]
    jobs.check_training(weights, log)
    sizes = [n for _, n in log]
    assert 2 in sizes and sizes[-1] == 1
    jobs.check_redone(ran, killed_after)  # rank 0 redid only the steps since the last commit
    # The retry came back on the killed rank's host (the only free core), which horarun had
    # blacklisted: no third worker was started.
    assert sum("runs in Spark task" in line for line in lines.lines) == 2, lines.lines
    assert any(f"(started as rank 1) on host {retry.group(1)} runs" in line for line in lines.lines), lines.lines
    _assert_none_left(env["HORA_TEST_MARKER"])


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _wait_for_line(job, lines, pattern):
    while True:
        found = next(((m, when) for m, when in zip(map(re.compile(pattern).search, list(lines.lines)), lines.times)
                      if m), None)
        if found:
            return found
        assert not job.ended(), f"the run ended before a log line matched {pattern!r}: {lines.lines}"
        assert time.monotonic() < job.deadline, f"no log line matched {pattern!r}: {lines.lines}"
        time.sleep(0.05)


def test_fewer_than_min_num_proc_fails_naming_the_lost_worker(spark_hosts, tmp_path):
    env = _marker_env()
    elastic_timeout = 5
    executor = _Elastic(num_proc=2, min_num_proc=2, start_timeout=120, elastic_timeout=elastic_timeout, env=env)
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), lambda log: False))
    jobs.wait_progress(job, str(tmp_path), 2, COMMIT_EVERY)
    with open(tmp_path / "pid.1") as f:
        os.kill(int(f.read()), signal.SIGKILL)  # the rank's process, as the OOM killer would
    killed_at = time.monotonic()
    with pytest.raises(RunError) as info:
        job.result()
    elapsed = time.monotonic() - killed_at
    print(f"\nhora.spark elastic: rank killed below min_num_proc -> RunError after {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < elastic_timeout + 15
    message = str(info.value)
    assert "fewer than --min-np 2" in message, message
    assert re.search(r"worker 127\.0\.0\.[23]:0 \(started as rank 1\) on host 127\.0\.0\.[23] was killed by SIGKILL",
                     message), message
    assert info.value.rank == 1
    _assert_none_left(env["HORA_TEST_MARKER"])


def _raise_on_rank_one():
    import torch

    import hora.torch as hvd

    hvd.init()
    state = hvd.elastic.ObjectState(step=0)

    @hvd.elastic.run
    def loop(state):
        hvd.allreduce(torch.ones(2), name="before")
        if hvd.rank() == 1:
            raise ValueError("bad shard 3")
        hvd.allreduce(torch.ones(2), name="after")  # rank 1 left: this fails, and the job re-forms

    loop(state)


def test_an_exception_is_raised_on_the_driver_with_its_rank_and_traceback(spark_hosts):
    """reset_limit=0: the re-formation that rank 1's failure needs ends the job at once."""
    env = _marker_env()
    started = time.monotonic()
    executor = _Elastic(num_proc=2, min_num_proc=1, reset_limit=0, start_timeout=120, elastic_timeout=60, env=env)
    with pytest.raises(RunError) as info:
        jobs.RunInThread(executor, _raise_on_rank_one, ()).result()
    message = str(info.value)
    assert re.search(r"\(started as rank 1\) on host 127\.0\.0\.[23] raised ValueError: bad shard 3", message), message
    assert "--reset-limit is 0" in message, message
    assert info.value.rank == 1
    assert "Traceback" in info.value.remote_traceback and 'raise ValueError("bad shard 3")' in \
        info.value.remote_traceback
    assert time.monotonic() - started < 60
    _assert_none_left(env["HORA_TEST_MARKER"])


@pytest.mark.parametrize("local_ip,host", [("127.0.0.3", "127.0.0.3"), ("10.255.255.1", "127.0.0.1")])
def test_a_task_reaches_the_driver_from_spark_local_ip_if_it_is_an_address_here(monkeypatch, local_ip, host):
    """A task's host is the address its connection leaves from: $SPARK_LOCAL_IP when this machine
    has it (as each worker of spark_hosts does), else the one the route picks."""
    import socket
    import threading

    from hora._channel import Channel
    from hora.spark.task import connect

    monkeypatch.setenv("SPARK_LOCAL_IP", local_ip)
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        accepted = threading.Thread(target=lambda: Channel.accept(server.accept()[0], "secret"), daemon=True)
        accepted.start()
        channel, found = connect(("127.0.0.1", server.getsockname()[1]), "secret", timeout=10)
        accepted.join(10)
        channel.close()
    assert found == host
