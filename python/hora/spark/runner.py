"""hora.spark.run: a function on N ranks, each a Spark task of one barrier stage (all scheduled
together or not at all), with horovod.spark.run's signature and semantics.

The driver serves hora.spark.driver's service; each task (hora.spark.task) registers with it
from its executor; when all have, the driver numbers the ranks (those of one host contiguous)
and sends each task its environment: rank, size, host, rank 0's store address and the job
secret (which travels only inside Spark's task and this authenticated channel, never on a
command line). The task runs the rank as a child process, which serves the store on rank 0
(HORA_SERVE_STORE), so `hvd.init()` in the function joins the job whatever its frontend.

Nothing waits forever: registration waits start_timeout; afterwards every rank's process is
watched through its task's connection, so a rank that raises, exits or is killed (with its task
or its executor) ends the run at once with a RunError naming the rank and its host, the other
ranks are stopped and the Spark job group cancelled.
"""

import itertools
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time

import cloudpickle

from hora import _job_env
from hora.runner import RunError, _raise_root_cause
import hora.spark.failure as failure
from hora.spark.driver import DriverService

log = logging.getLogger("hora.spark")
_job_ids = itertools.count()
# How long a failed run waits for Spark to end its cancelled job (its tasks stop by themselves
# once the driver's service closes; a job still waiting for slots ends at Spark's next retry).
_CANCEL_WAIT_SECONDS = 2.0


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, use_mpi=None, use_gloo=None,
        extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
        prefix_output_with_timestamp=False, executable=None):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks, one Spark task each (barrier
    execution mode), and returns their results in rank order.

    ``num_proc``: defaults to the SparkContext's defaultParallelism. ``start_timeout``: seconds
    for all tasks to be scheduled and register (default $HOROVOD_SPARK_START_TIMEOUT, else 600);
    TimeoutError after it. ``env``: extra environment variables for the ranks. ``stdout``,
    ``stderr``: where the ranks' output goes, each line prefixed ``[rank]<stdout>:`` (default:
    this process's). ``verbose``: 0-2, this function's own log messages. ``nics``: one network
    interface name for hora's connections. ``executable``: the Python that runs the ranks.
    ``use_mpi``, ``use_gloo``, ``extra_mpi_args`` choose Horovod's controller; hora has one, so
    use_mpi and extra_mpi_args are refused. A rank's exception is raised here as RunError with
    its rank and traceback; a rank that dies raises RunError naming its rank and host.
    """
    from pyspark import SparkContext

    if use_mpi or extra_mpi_args:
        raise ValueError("hora.spark.run: use_mpi and extra_mpi_args are not supported (hora has its own transport)")
    if start_timeout is None:
        start_timeout = float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))
    iface = _job_env.iface_from_nics(nics)
    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("hora.spark.run: could not find an active SparkContext; are you running in a PySpark "
                           "session?")
    num_proc = num_proc or sc.defaultParallelism
    if num_proc < 1:
        raise ValueError(f"hora.spark.run: num_proc must be at least 1, got {num_proc}")
    if verbose >= 1:
        log.info("hora.spark.run: running %d ranks", num_proc)

    job = _Job(sc, num_proc, start_timeout, env, iface, executable,
               cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}))),
               _Output(stdout or sys.stdout, stderr or sys.stderr, prefix_output_with_timestamp))
    return job.run()


class _Output:
    """Writes the ranks' lines with Horovod's prefixes: ``[{time}][rank]<stdout>:line``."""

    def __init__(self, stdout, stderr, timestamp):
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._timestamp = timestamp

    def write(self, rank, stream, text):
        when = time.asctime() if self._timestamp else ""
        out = self._streams[stream]
        out.write(f"{when}[{rank}]<{stream}>:{text}" + ("" if text.endswith("\n") else "\n"))
        out.flush()


class _Job:
    def __init__(self, sc, num_proc, start_timeout, env, iface, executable, payload, output):
        self.sc, self.num_proc, self.start_timeout = sc, num_proc, start_timeout
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.iface, self.executable, self.payload, self.output = iface, executable, payload, output
        self.group = f"hora.spark.run.{os.getpid()}.{next(_job_ids)}"
        self.secret = _job_env.new_secret()
        self.rank_of = {}   # Spark partition index -> rank
        self.host_of = {}   # rank -> host address
        self.outcomes = {}  # rank -> hora._run_worker's outcome tuple
        self.exits = []     # (rank, "on host h exited with code 3"), in the order they came
        self.spark_error = None

    def run(self):
        bind = self.sc.getConf().get("spark.driver.bindAddress") or self.sc.getConf().get("spark.driver.host")
        advertise = self.sc.getConf().get("spark.driver.host") or socket.gethostname()
        service = DriverService(self.secret, socket.gethostbyname(bind or advertise))
        spark_thread = threading.Thread(target=self._spark_job, args=(service.events, (advertise, service.port)),
                                        name="hora-spark-job", daemon=True)
        spark_thread.start()
        try:
            self._register(service.events)
            self._watch(service.events)
        finally:
            service.close()  # the tasks still running kill their ranks
            if spark_thread.is_alive():
                self._cancel_spark_job()
                spark_thread.join(_CANCEL_WAIT_SECONDS)
        return [self.outcomes[r][1] for r in range(self.num_proc)]

    def _cancel_spark_job(self):
        # A barrier stage that needs more slots than the cluster has is not a job yet: Spark
        # resubmits it every 15 s (spark.scheduler.barrier.maxConcurrentTasksCheck.*), and only
        # Spark 4's cancelJobGroupAndFutureJobs stops those resubmissions too.
        cancel = getattr(self.sc, "cancelJobGroupAndFutureJobs", self.sc.cancelJobGroup)
        cancel(self.group)

    def _spark_job(self, events, driver_address):
        from hora.spark.task import run_task
        from pyspark import BarrierTaskContext

        secret, payload, timeout, executable = self.secret, self.payload, self.start_timeout, self.executable

        def task(_):
            run_task(BarrierTaskContext.get().partitionId(), driver_address, secret, payload, timeout, executable)
            return []

        try:
            self.sc.setJobGroup(self.group, "hora.spark.run", interruptOnCancel=True)
            rdd = self.sc.parallelize(range(self.num_proc), self.num_proc)
            rdd.barrier().mapPartitions(task).collect()
            events.put(("spark", None))
        except Exception as e:  # the job failed or was cancelled: run() decides what that means
            events.put(("spark", e))

    def _register(self, events):
        """Waits for every task's hello, then numbers the ranks and sends each its environment."""
        deadline = time.monotonic() + self.start_timeout
        hellos = {}
        while len(hellos) < self.num_proc:
            try:
                event = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(
                    f"hora.spark.run: timed out after {self.start_timeout:g} s waiting for {self.num_proc} Spark "
                    f"tasks to start ({len(hellos)} started): barrier mode runs all ranks at once, so the cluster "
                    f"needs {self.num_proc} free task slots; add executors or cores, or raise start_timeout if "
                    "executors are allocated on demand") from None
            if event[0] == "hello":
                _, channel, index, host, hostname, port, pid = event
                if index in hellos:
                    raise RunError(f"hora.spark.run: Spark restarted task {index} (on {host}) before the job started; "
                                   "see the executor's log")
                hellos[index] = (channel, host, hostname, port)
                log.debug("hora.spark.run: task %d registered from %s (%s), pid %d", index, host, hostname, pid)
            elif event[0] == "spark":
                raise self._spark_job_error(f"the Spark job ended before its {self.num_proc} tasks started",
                                            event[1])
            elif event[0] == "lost":
                raise RunError(f"hora.spark.run: Spark task {event[1]} was lost before the job started ({event[2]})")
        indices = sorted(hellos)
        order = [indices[i] for i in _job_env.rank_order([hellos[i][1] for i in indices])]
        store_host, store_port = hellos[order[0]][1], hellos[order[0]][3]
        for rank, index in enumerate(order):
            self.rank_of[index] = rank
            self.host_of[rank] = hellos[index][1]
        log.info("hora.spark.run: ranks on hosts %s; rank 0 serves the store on %s:%d",
                 [self.host_of[r] for r in range(self.num_proc)], store_host, store_port)
        for index, rank in self.rank_of.items():
            rank_env = dict(self.env)
            rank_env.update(_job_env.rank_environment(rank, self.num_proc, self.host_of[rank], store_host, store_port,
                                                      self.secret, self.iface))
            hellos[index][0].send(("assign", rank, rank_env))

    def _watch(self, events):
        """Forwards output and collects outcomes until every rank exited; on the first failure,
        gives the others a moment to report theirs, then raises naming the root cause."""
        exited = set()
        failed_at = None
        while len(exited) < self.num_proc:
            timeout = _job_env.grace_left(failed_at)
            try:
                event = events.get(timeout=timeout)
            except queue.Empty:
                break
            kind = event[0]
            if kind == "spark":
                if event[1] is not None and failed_at is None:
                    failed_at = time.monotonic()
                    self.spark_error = event[1]
                continue
            if kind == "hello":
                event[1].close()  # a retried task of a failed stage: the run is over
                continue
            rank = self.rank_of[event[1]]
            if kind == "out":
                self.output.write(rank, event[2], event[3])
            elif kind == "outcome":
                self.outcomes[rank] = cloudpickle.loads(event[2])
                if self.outcomes[rank][0] == "error" and failed_at is None:
                    failed_at = time.monotonic()
            elif kind in ("exit", "lost"):
                exited.add(rank)
                if rank not in self.outcomes:
                    self.exits.append((rank, self._how_it_left(rank, kind, event[2])))
                    failed_at = failed_at or time.monotonic()
                elif kind == "exit" and event[2] != 0 and self.outcomes[rank][0] == "ok":
                    self.exits.append((rank, f"on host {self.host_of[rank]} exited with code {event[2]}"))
                    failed_at = failed_at or time.monotonic()
        if failed_at is None:
            return
        missing = [r for r in range(self.num_proc) if r not in self.outcomes]
        if any(o[0] == "error" for o in self.outcomes.values()) or self.exits:
            _raise_root_cause(self.outcomes, missing, self.exits[0] if self.exits else None, None,
                              stopped_by="hora.spark.run")
        raise self._spark_job_error("the Spark job failed", self.spark_error)

    def _spark_job_error(self, what, error):
        """RunError for a Spark job that failed outside the ranks' own processes (a task's Python
        could not start or import hora, an executor was lost): the failed task's cause and
        Python traceback, and the Python the executors run, the usual suspect."""
        found = failure.read(error)
        rank = self.rank_of.get(found.partition)
        task = "" if found.partition is None else f" Spark task {found.partition}" + (
            "" if rank is None else f" (rank {rank} on host {self.host_of[rank]})") + " failed."
        text = (f"hora.spark.run: {what}:{task} {found.summary}\n"
                f"(the executors run {self.sc.pythonExec}: the session's PYSPARK_PYTHON)")
        if found.python_traceback:
            text += f"\nPython traceback of Spark task {found.partition}:\n{found.python_traceback}"
        e = RunError(text, rank=rank, remote_traceback=found.python_traceback)
        e.__cause__ = error
        return e

    def _how_it_left(self, rank, kind, detail):
        host = self.host_of[rank]
        if kind == "lost":
            return f"on host {host} lost its Spark task (the task's process or its executor died: {detail})"
        if detail < 0:
            return f"on host {host} was killed by {signal.Signals(-detail).name}"
        return f"on host {host} exited with code {detail}"
