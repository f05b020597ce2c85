"""hora.spark.run and HorovodRunner on a real Spark cluster (conftest.py): barrier-mode tasks,
results against numpy, output prefixes, a rank's exception, a rank killed, an executor killed,
too few slots. Every failure must reach the driver within seconds, naming the rank."""

import io
import os
import re
import sys
import time

import numpy
import pytest

import runner_jobs
from hora.runner import RunError

# The contract: a dead rank fails the run within this many seconds.
FAILURE_DEADLINE_S = 10.0


def test_without_an_active_spark_context_it_says_so():
    import hora.spark
    from pyspark import SparkContext

    assert SparkContext._active_spark_context is None  # this test runs before the module's session
    with pytest.raises(RuntimeError, match="could not find an active SparkContext"):
        hora.spark.run(lambda: 0, num_proc=2)


def _allreduce_job(scale):
    import hora.torch as hvd
    import torch

    hvd.init()
    data = numpy.arange(10, dtype=numpy.float32) * (hvd.rank() + 1) * scale
    print(f"rank {hvd.rank()} of {hvd.size()} says hello")
    print(f"rank {hvd.rank()} to stderr", file=sys.stderr)
    total = hvd.allreduce(torch.from_numpy(data), op=hvd.Sum).numpy()
    gathered = hvd.allgather(torch.tensor([[hvd.rank()]])).numpy().ravel().tolist()
    return hvd.rank(), hvd.size(), hvd.local_rank(), total, gathered, open("/proc/self/cmdline", "rb").read()


def test_allreduce_results_in_rank_order_with_prefixed_output(spark):
    import hora.spark

    out, err = io.StringIO(), io.StringIO()
    results = hora.spark.run(_allreduce_job, args=(2.0,), num_proc=2, stdout=out, stderr=err, start_timeout=120)
    want = sum(numpy.arange(10, dtype=numpy.float32) * (r + 1) * 2.0 for r in range(2))
    for rank, (r, size, local_rank, total, gathered, cmdline) in enumerate(results):
        assert (r, size, gathered) == (rank, 2, [0, 1])
        assert local_rank == rank  # both executors are on this host: one host, two local ranks
        numpy.testing.assert_array_equal(total, want)
        assert b"HORA_SECRET" not in cmdline and b"hora._run_worker" in cmdline
    assert "[0]<stdout>:rank 0 of 2 says hello\n" in out.getvalue()
    assert "[1]<stdout>:rank 1 of 2 says hello\n" in out.getvalue()
    assert "[1]<stderr>:rank 1 to stderr\n" in err.getvalue()


def test_timestamps_environment_and_default_size(spark):
    import hora.spark

    out = io.StringIO()
    results = hora.spark.run(lambda: (print("stamped"), os.environ["GREETING"], int(os.environ["HORA_SIZE"]))[1:],
                             env={"GREETING": "hi"}, stdout=out, prefix_output_with_timestamp=True)
    assert results == [("hi", 2), ("hi", 2)]  # num_proc: the cluster's default parallelism, 2 cores
    stamp = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"
    assert re.search(rf"^{stamp}\[1\]<stdout>:stamped$", out.getvalue(), re.M), out.getvalue()


def _raise_on_rank_one():
    import hora.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad shard 3")
    hvd.allreduce(torch.ones(3))  # rank 0 waits for rank 1, which left: it fails, not hangs


def test_an_exception_is_raised_with_its_rank_and_traceback(spark):
    import hora.spark

    with pytest.raises(RunError) as info:
        hora.spark.run(_raise_on_rank_one, num_proc=2, stderr=io.StringIO())
    e = info.value
    assert e.rank == 1
    assert str(e).startswith("rank 1 raised ValueError: bad shard 3")
    assert "in _raise_on_rank_one" in e.remote_traceback
    assert isinstance(e.__cause__, ValueError)
    assert "rank 0 raised ShutdownError" in str(e)  # the consequence, listed after the cause


def test_an_ordinary_stage_failure_is_read_for_its_task_and_cause():
    from hora.spark import failure

    # Spark's text for a task that failed its last attempt in an ordinary (not barrier) stage.
    first = ("Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times, most recent failure: Lost task "
             "1.3 in stage 3.0 (TID 9) (10.0.0.2 executor 1): java.lang.IllegalStateException: shuffle lost")
    text = (f"{first}\n\tat a.B.c(B.java:1)\nCaused by: java.io.IOException: disk gone\n\tat d.E.f(E.java:2)\n"
            "\t... 21 more\n\nDriver stacktrace:\n\tat g.H.i(H.scala:3)\n")
    found = failure.read(RuntimeError(text))
    assert found == failure.SparkFailure(f"{first} Caused by: java.io.IOException: disk gone", 1, None)


def _run_with_executor_python(spark, python):
    """hora.spark.run with the executors' Python set to ``python`` for this one job (PySpark
    takes sc.pythonExec when it builds the job); the RunError it raised."""
    import hora.spark

    sc = spark.sparkContext
    sc.pythonExec = python
    try:
        with pytest.raises(RunError) as info:
            hora.spark.run(lambda: 0, num_proc=2, start_timeout=60)
    finally:
        sc.pythonExec = sys.executable
    return info.value


def test_a_task_whose_python_cannot_import_hora_shows_the_python_cause(spark, tmp_path):
    # A Python without the venv's site-packages (-S), as a PYSPARK_PYTHON that is not the venv's.
    python = tmp_path / "python-without-hora"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    e = _run_with_executor_python(spark, str(python))
    message = str(e)
    assert "The task's Python raised ModuleNotFoundError: No module named 'hora'" in message.splitlines()[0], message
    assert f"the executors run {python}" in message
    assert e.remote_traceback.startswith("Traceback (most recent call last):"), e.remote_traceback
    assert e.remote_traceback.endswith("ModuleNotFoundError: No module named 'hora'"), e.remote_traceback
    assert "\nPython traceback of Spark task " in message
    assert "\tat " not in message and "more" not in message.split("Traceback")[0]  # no Java frames


def test_a_missing_executor_python_is_named(spark):
    e = _run_with_executor_python(spark, "/nonexistent/python3")
    first = str(e).splitlines()[0]
    assert 'java.io.IOException: Cannot run program "/nonexistent/python3"' in first, str(e)
    assert "No such file or directory" in first and "\tat " not in str(e), str(e)


def _run_and_kill(target_of):
    """A training on 2 ranks whose rank 1 gets SIGKILL at target_of(its pid, its parent's pid):
    (the RunError, seconds from the kill to it)."""
    import hora.spark

    e, elapsed = runner_jobs.run_and_kill(
        lambda fn, pid_dir: hora.spark.run(fn, args=(pid_dir,), num_proc=2, stderr=io.StringIO()), target_of)
    assert isinstance(e, RunError), e
    return e, elapsed


def _executor_of(pid):
    """The executor JVM above a rank's process (rank -> task's Python worker -> PySpark daemon -> JVM)."""
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "java":
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise AssertionError("no java process above the rank")


def test_a_killed_rank_fails_the_run_within_seconds_naming_it(spark):
    e, elapsed = _run_and_kill(lambda pid, ppid: pid)
    print(f"\nhora.spark: rank process killed -> RunError in {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < FAILURE_DEADLINE_S
    assert e.rank == 1
    assert str(e).startswith("rank 1 on host 127.0.0.1 was killed by SIGKILL"), str(e)


def test_a_killed_spark_task_fails_the_run_within_seconds_naming_it(spark):
    e, elapsed = _run_and_kill(lambda pid, ppid: ppid)
    print(f"\nhora.spark: Spark task's Python worker killed -> RunError in {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < FAILURE_DEADLINE_S
    assert e.rank == 1
    assert str(e).startswith("rank 1 on host 127.0.0.1 lost its Spark task"), str(e)


def test_too_few_slots_is_a_start_timeout(spark):
    import hora.spark

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="3 Spark tasks to start .* needs 3 free task slots"):
        hora.spark.run(lambda: 0, num_proc=3, start_timeout=3)
    assert time.monotonic() - start < 3 + FAILURE_DEADLINE_S


def test_training_through_spark_matches_the_single_process_reference(spark):
    import hora.spark

    runner_jobs.check(hora.spark.run(runner_jobs.train, num_proc=runner_jobs.RANKS))


def _rank_and_kwargs(**kwargs):
    import hora.torch as hvd

    hvd.init()
    return hvd.rank(), hvd.size(), kwargs


def test_horovod_runner_returns_rank_zeros_value(spark):
    from hora.spark import HorovodRunner

    assert HorovodRunner(np=2).run(_rank_and_kwargs, lr=0.1) == (0, 2, {"lr": 0.1})


def test_horovod_runner_with_negative_np_runs_on_the_driver():
    from hora.spark import HorovodRunner

    assert HorovodRunner(np=-2).run(_rank_and_kwargs, lr=0.2) == (0, 2, {"lr": 0.2})
    with pytest.raises(ValueError, match="non-zero"):
        HorovodRunner(np=0)


def test_the_fashion_mnist_example_trains_through_horovod_runner(spark, capsys, tmp_path):
    import importlib.util

    import cloudpickle

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "spark", "fashion_mnist_spark.py")
    spec = importlib.util.spec_from_file_location("fashion_mnist_spark", path)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # cloudpickle pickles by value only what was imported
    spec.loader.exec_module(example)
    cloudpickle.register_pickle_by_value(example)
    argv = ["--model", "cnn", "--epochs", "1", "--train-limit", "2000", "--no-progress",
            "--checkpoint", str(tmp_path / "checkpoint.pt")]
    assert example.run(2, argv, spark) == "done"
    out = capsys.readouterr().out
    assert re.search(r"^\[0\]<stdout>:RESULT accuracy=0\.\d+", out, re.M), out
    assert (tmp_path / "checkpoint.pt").exists()  # rank 0 wrote it, through the shared file system


def _load_example(name):
    import importlib.util

    import cloudpickle

    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "spark", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # cloudpickle pickles by value only what was imported
    spec.loader.exec_module(example)
    cloudpickle.register_pickle_by_value(example)
    return example


def test_the_keras_fashion_mnist_example_trains_on_spark(spark, capsys):
    import hora.spark

    example = _load_example("fashion_mnist_keras_spark")
    example.ship(spark)
    options = dict(epochs=2, steps_per_epoch=20, test_images=1000)
    results = hora.spark.run(example.train, args=(options,), num_proc=2)
    assert [(r["rank"], r["size"]) for r in results] == [(0, 2), (1, 2)]
    # Data parallelism: the same averaged gradients from the same broadcast start, so the same
    # weights on every rank, bit for bit.
    for mine, theirs in zip(results[0]["weights"], results[1]["weights"]):
        numpy.testing.assert_array_equal(mine, theirs)
    r = results[0]
    assert r["loss_after"] < 0.8 * r["loss_before"], r  # a chance-level start is ln(10) = 2.30
    assert r["accuracy"] > 0.6, r
    assert results[1]["accuracy"] == r["accuracy"]  # averaged over the ranks' shards
    out = capsys.readouterr().out
    assert re.search(r"^\[0\]<stdout>:RESULT test loss", out, re.M), out


def test_a_killed_executor_fails_the_run_within_seconds_naming_it(spark):
    # Last: the cluster replaces the executor, which takes a while.
    e, elapsed = _run_and_kill(lambda pid, ppid: _executor_of(pid))
    print(f"\nhora.spark: executor JVM killed -> RunError in {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < FAILURE_DEADLINE_S
    assert e.rank == 1
    assert str(e).startswith("rank 1 on host 127.0.0.1"), str(e)
