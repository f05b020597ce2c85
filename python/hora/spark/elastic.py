"""hora.spark.run_elastic: an elastic hora job whose workers are ordinary Spark tasks, with
horovod.spark.run_elastic's signature and semantics (docs/spark_ray.md, "Elastic training on
Spark").

Not a barrier stage: Spark fails a whole barrier stage when one of its tasks fails, so no rank
would survive. Instead ``max_num_proc`` ordinary tasks each register with the driver's service
(hora.spark.driver) as an idle slot on their host (hora.spark.task.run_elastic_task), and
horarun's elastic driver (hora._elastic_job) runs the job: its discovery is the live slots of
each host, and each worker it starts is a local proxy that this module hands to an idle slot on
the worker's host, whose task runs the rank as a child process. A rank that fails fails its
task; Spark's retry of the task (spark.task.maxFailures) registers as a new slot, which horarun
uses if its host is not blacklisted.
"""

import itertools
import logging
import os
import signal
import socket
import sys
import threading
import time

import cloudpickle

import hora.spark.failure as failure
from hora._elastic_job import ElasticJob, WorkerError, elastic_call
from hora.runner import RunError
from hora.spark.driver import DriverService
from hora.spark.runner import _Output

log = logging.getLogger("hora.spark")
_job_ids = itertools.count()

WHO = "hora.spark.run_elastic"
# How long a worker that horarun starts on a host waits for an idle task there (one that just
# ended may still be listed for up to a discovery period).
IDLE_SLOT_WAIT_S = 10.0
# How long the end of a run waits for Spark to end the job once the driver's service closed (the
# idle tasks return at once), and again after cancelling its job group.
SPARK_END_WAIT_S = 2.0
# How often the start polls for registrations and a failed Spark job.
_POLL_S = 0.2


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Runs ``fn(*args, **kwargs)`` as an elastic job on Spark tasks and returns the results of
    the last generation's ranks, in rank order. ``fn`` trains inside hvd.elastic.run with state
    objects (hora.torch.elastic, hora.tensorflow.keras.elastic).

    ``num_proc``: ranks to start with (default defaultParallelism); ``min_num_proc`` (default
    num_proc): below it for ``elastic_timeout`` seconds (default $HOROVOD_ELASTIC_TIMEOUT, else
    600) the job fails; ``max_num_proc`` (default num_proc): the Spark tasks run, hence the
    largest size. ``start_timeout``: seconds for num_proc tasks to register (default
    $HOROVOD_SPARK_START_TIMEOUT, else 600). ``reset_limit``: most re-formations. ``env``,
    ``stdout``, ``stderr``, ``verbose``, ``nics``, ``prefix_output_with_timestamp``: as in
    hora.spark.run. ``min_np``/``max_np``: Horovod's older names. RunError when the job fails,
    naming what happened to which worker (rank, host) and the first traceback."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError(f"{WHO}: could not find an active SparkContext; are you running in a PySpark session?")
    num_proc = num_proc or sc.defaultParallelism
    min_num_proc = min_np if min_np is not None else (min_num_proc or num_proc)
    max_num_proc = max_np if max_np is not None else (max_num_proc or num_proc)
    if not 1 <= min_num_proc <= num_proc <= max_num_proc:
        raise ValueError(f"{WHO}: needs 1 <= min_num_proc <= num_proc <= max_num_proc, got {min_num_proc}, "
                         f"{num_proc}, {max_num_proc}")
    if start_timeout is None:
        start_timeout = float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", "600"))
    if elastic_timeout is None:
        elastic_timeout = float(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", "600"))
    if verbose >= 1:
        log.info("%s: %d Spark tasks for %d-%d ranks, starting with %d", WHO, max_num_proc, min_num_proc,
                 max_num_proc, num_proc)
    job = SparkElasticJob(sc, _Slots(), min_workers=min_num_proc, num_workers=num_proc, max_workers=max_num_proc,
                          reset_limit=reset_limit, elastic_timeout=elastic_timeout, nics=nics, verbose=verbose,
                          extra_env=env)
    payload = cloudpickle.dumps((elastic_call(fn), tuple(args), dict(kwargs or {})))
    return job.run_on_spark(payload, start_timeout,
                            _Output(stdout or sys.stdout, stderr or sys.stderr, prefix_output_with_timestamp))


class _Slot:
    """One registered Spark task (partition, attempt) on its host, idle until given a worker."""

    def __init__(self, key, channel, host, pid):
        self.key, self.channel, self.host, self.pid = key, channel, host, pid
        self.worker = None
        self.outcome = None             # hora._run_worker's outcome tuple, once reported
        self.end = None                 # ("exit", code) or ("lost", why)
        self.ended = threading.Event()  # the task's rank exited, or its connection closed


class _Slots:
    """The registered tasks; as a host discovery, the live ones (idle or running a rank) per host."""

    def __init__(self):
        self._cond = threading.Condition()
        self._slots = {}  # (partition, attempt) -> _Slot

    def add(self, slot):
        with self._cond:
            self._slots[slot.key] = slot
            self._cond.notify_all()

    def get(self, key):
        with self._cond:
            return self._slots.get(key)

    def end(self, key, end):
        with self._cond:
            slot = self._slots.get(key)
            if slot is not None and slot.end is None:
                slot.end = end
                slot.ended.set()
            self._cond.notify_all()

    def end_all(self, why):
        with self._cond:
            keys = list(self._slots)
        for key in keys:
            self.end(key, ("lost", why))

    def live(self):
        with self._cond:
            return sum(1 for s in self._slots.values() if s.end is None)

    def find_available_hosts_and_slots(self):
        hosts = {}
        with self._cond:
            for slot in self._slots.values():
                if slot.end is None:
                    hosts[slot.host] = hosts.get(slot.host, 0) + 1
        return hosts

    def take_idle(self, host, worker, timeout):
        """An idle live slot on ``host``, now ``worker``'s; None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                idle = [s for s in self._slots.values() if s.host == host and s.end is None and s.worker is None]
                if idle:
                    idle[0].worker = worker
                    return idle[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)


class SparkElasticJob(ElasticJob):
    """ElasticJob whose workers run in registered Spark tasks (_Slots)."""

    who = WHO
    where = "host"

    def __init__(self, sc, slots, **limits):
        super().__init__(slots, **limits)
        self.sc, self.slots = sc, slots
        self.group = f"hora.spark.run_elastic.{os.getpid()}.{next(_job_ids)}"
        self.output = None
        self.spark_error = None

    def run_on_spark(self, payload, start_timeout, output):
        """Starts the driver's service and the Spark job of max_workers tasks, waits (up to
        start_timeout) for num_workers of them to register, runs the job; stops every task at
        the end, whatever happened."""
        self.output = output
        conf = self.sc.getConf()
        bind = conf.get("spark.driver.bindAddress") or conf.get("spark.driver.host")
        advertise = conf.get("spark.driver.host") or socket.gethostname()
        service = DriverService(self._secret, socket.gethostbyname(bind or advertise))
        threading.Thread(target=self._dispatch, args=(service.events,), name="hora-spark-elastic",
                         daemon=True).start()
        spark = threading.Thread(target=self._spark_job, args=(service.events, (advertise, service.port), payload,
                                                               start_timeout), name="hora-spark-job", daemon=True)
        spark.start()
        try:
            self._wait_for_slots(start_timeout)
            return self.run()
        finally:
            service.close()  # the idle tasks return, the busy ones kill their ranks
            service.events.put(("stop",))
            self.slots.end_all("the job is over")
            self._end_spark_job(spark)

    def _spark_job(self, events, driver_address, payload, start_timeout):
        from pyspark import TaskContext

        from hora.spark.task import run_elastic_task

        secret = self._secret  # in the task's closure: it travels inside Spark's serialized task

        def task(index, _):
            attempt = TaskContext.get().attemptNumber()
            run_elastic_task(index, attempt, driver_address, secret, payload, start_timeout, None)
            return []

        try:
            self.sc.setJobGroup(self.group, WHO, interruptOnCancel=True)
            n = self.max_workers
            self.sc.range(0, n, numSlices=n).mapPartitionsWithIndex(task).collect()
            events.put(("spark", None))
        except Exception as e:  # the job failed or was cancelled: _dispatch decides what that means
            events.put(("spark", e))

    def _end_spark_job(self, spark):
        spark.join(SPARK_END_WAIT_S)
        if spark.is_alive():  # tasks not scheduled yet, or retries of failed ones
            cancel = getattr(self.sc, "cancelJobGroupAndFutureJobs", self.sc.cancelJobGroup)
            cancel(self.group)
            spark.join(SPARK_END_WAIT_S)

    def _wait_for_slots(self, start_timeout):
        deadline = time.monotonic() + start_timeout
        while self.slots.live() < self.num_workers:
            if self.spark_error is not None:
                raise self._spark_error(f"the Spark job ended before {self.num_workers} tasks started")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{WHO}: timed out after {start_timeout:g} s waiting for {self.num_workers} Spark tasks to start "
                    f"({self.slots.live()} started): the job starts with num_proc={self.num_workers} ranks, so the "
                    "cluster needs that many free task slots; add executors or cores, or raise start_timeout")
            time.sleep(_POLL_S)

    def _spark_error(self, what):
        found = failure.read(self.spark_error)
        text = (f"{WHO}: {what}: {found.summary}\n(the executors run {self.sc.pythonExec}: the session's "
                f"PYSPARK_PYTHON)")
        if found.python_traceback:
            text += f"\nPython traceback of Spark task {found.partition}:\n{found.python_traceback}"
        e = RunError(text, remote_traceback=found.python_traceback)
        e.__cause__ = self.spark_error
        return e

    # -- the tasks' events -----------------------------------------------------------------------

    def _dispatch(self, events):
        """Turns the service's events into slots and their ends, and writes the ranks' output,
        until the run's end puts ("stop",)."""
        while True:
            event = events.get()
            kind = event[0]
            if kind == "stop":
                return
            if kind == "spark":
                self._spark_ended(event[1])
            elif kind == "hello":
                _, channel, key, host, hostname, _, pid = event
                self.slots.add(_Slot(key, channel, host, pid))
                log.info("%s: Spark task %d (attempt %d) registered from %s (%s), pid %d", WHO, key[0], key[1],
                         host, hostname, pid)
            else:
                self._task_event(kind, event[1], event[2:])

    def _task_event(self, kind, key, rest):
        slot = self.slots.get(key)
        if slot is None:
            return
        if kind == "out" and slot.worker is not None:
            self.output.write(slot.worker.started_rank, rest[0], rest[1])
        elif kind == "outcome":
            slot.outcome = cloudpickle.loads(rest[0])
        elif kind in ("exit", "lost"):
            self.slots.end(key, (kind, rest[0]))

    def _spark_ended(self, error):
        if error is None:
            return  # every task returned: the job is over
        self.spark_error = error
        if self.slots.live() or self.workers():
            self.abort(f"the Spark job failed: {failure.read(error).summary}")

    # -- ElasticJob's hooks ----------------------------------------------------------------------

    def _launch(self, worker, env):
        slot = self.slots.take_idle(worker.host, worker, IDLE_SLOT_WAIT_S)
        if slot is None:
            raise WorkerError(f"{WHO}: {worker.name()}: no idle Spark task registered on host {worker.host} within "
                              f"{IDLE_SLOT_WAIT_S:g} s")
        worker.handle = slot
        try:
            slot.channel.send(("assign", worker.started_rank, env))
        except OSError as e:
            raise WorkerError(f"{WHO}: {worker.name()}: its Spark task {slot.key[0]} (attempt {slot.key[1]}) left "
                              f"before it got the worker ({type(e).__name__}: {e})") from None
        if worker.stopped:  # horarun stopped the proxy meanwhile
            slot.channel.close()
        log.info("%s: %s runs in Spark task %d (attempt %d), pid %d", WHO, worker.name(), slot.key[0], slot.key[1],
                 slot.pid)
        # As long as the rank lives: its exit, its task's death (the connection closes) or the
        # run's end (end_all) sets it.
        slot.ended.wait()
        return self._outcome(worker, slot)

    def _outcome(self, worker, slot):
        if worker.stopped:
            return 1, ""
        outcome = slot.outcome
        if outcome is not None and outcome[0] == "ok":
            kind, rank, value = outcome[1]
            if kind == "done":
                self._returned(worker, rank, value)
            return 0, ""
        if outcome is not None:
            _, type_name, message, traceback, _, _, _ = outcome
            text = f"{WHO}: {worker.name()} raised {type_name}: {message}"
            self._fail(worker, text, traceback)
            return 1, text
        text = f"{WHO}: {worker.name()} {_how_it_left(slot)}"
        self._fail(worker, text)
        return 1, text

    def _stop_worker(self, worker):
        if worker.handle is not None:
            worker.handle.channel.close()  # the task kills its rank, then returns


def _how_it_left(slot):
    kind, detail = slot.end
    where = f"in Spark task {slot.key[0]} (attempt {slot.key[1]})"
    if kind == "lost":
        return f"lost its Spark task (the task's process or its executor died: {detail}) {where}"
    if detail < 0:
        return f"was killed by {signal.Signals(detail * -1).name} {where}"
    return f"exited with code {detail} {where}"
