"""One run of an elastic hora job on Ray: horarun's elastic driver decides, Ray places
(docs/spark_ray.md, "Elastic training on Ray").

ElasticJob.run(worker_fn) starts horarun in elastic mode as a child process, with
- a discovery script that prints the host list hora.ray.discovery keeps from Ray's node list;
- HORA_ELASTIC_WORKERS_HERE=1, so that horarun starts every worker on this machine whatever its
  host; the worker command is hora.ray._actor_proxy, which asks this object's service to run the
  worker as a Ray actor on its host, and exits as the actor's function ends.

horarun serves the rendezvous store, forms the generations, blacklists failed hosts and applies
min/max workers, the reset limit, the elastic timeout and the cooldowns, exactly as for jobs on
ssh hosts; this class only turns "start worker w on host h" into an actor on h and the actor's
end into the proxy's exit code. A worker is one actor: its process is the rank across
generations (hvd.elastic.run re-forms in place), and it is killed when its proxy goes.
"""

import collections
import ctypes
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import ray

from hora import _job_env
from hora._channel import Channel
from hora.ray.discovery import HostsFile
from hora.ray.worker import BaseHorovodWorker
from hora.runner import RunError, _horarun

log = logging.getLogger("hora.ray")

# How long a proxy may take to say which worker it is, once connected.
HELLO_TIMEOUT_S = 10.0
# How long horarun gets to stop its workers after SIGTERM before it is killed.
HORARUN_STOP_S = 10.0
# horarun's lines kept for the error message of a failed job.
KEPT_LINES = 40
# How long run() waits, once the job ended, for Ray to report its killed actors dead: their
# resources are free for the next run when it returns.
ACTORS_GONE_S = 10.0


# Looked up here, not in the forked child, where loading a library could meet a lock that
# another of the driver's threads held at the fork.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: horarun gets SIGTERM when the thread that started it ends, so
    that neither it nor its workers outlive a driver that was killed."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def elastic_call(fn):
    """``fn(executable)`` wrapped for an elastic actor: ("done", rank, value) when it returned,
    with the worker's rank in the last generation; ("left", None, None) when horarun removed the
    worker (hora.common.elastic.rejoin exits with code 0). Other exceptions propagate."""

    def call(executable):
        try:
            value = fn(executable)
        except SystemExit as e:
            if e.code in (None, 0):
                return ("left", None, None)
            raise
        from hora.common import basics

        rank = basics.rank() if basics.is_initialized() else None
        return ("done", rank, value)

    return call


class _Worker:
    """What the driver knows of one elastic worker: horarun's id (host:slot), its host, the
    place it started in (HORA_RANK), its actor."""

    def __init__(self, worker_id, host, started_rank):
        self.id = worker_id
        self.host = host
        self.started_rank = started_rank
        self.actor = None
        self.ended = threading.Event()  # its function ended (or it could not start)
        self.stopped = False            # horarun stopped its proxy first

    def name(self):
        return f"worker {self.id} (started as rank {self.started_rank}) on node {self.host}"


class ElasticJob:
    """min_workers, max_workers, reset_limit, cooldown_range and elastic_timeout are horarun's
    --min-np, --max-np, --reset-limit, --blacklist-cooldown-range and --elastic-timeout.
    ``timeout_s`` bounds the ranks' collectives (HORA_TIMEOUT_SECONDS) and each actor's start;
    ``resources`` are one actor's ({"CPU": n, "GPU": m}); ``executable`` is (cls, args, kwargs)."""

    def __init__(self, discovery, *, min_workers, max_workers=None, reset_limit=None, cooldown_range=None,
                 elastic_timeout=600, timeout_s=30, nics=None, verbose=1, resources=None, extra_env_vars=None,
                 executable=None):
        self.discovery = discovery
        self.min_workers, self.max_workers = min_workers, max_workers
        self.reset_limit, self.cooldown_range, self.elastic_timeout = reset_limit, cooldown_range, elastic_timeout
        self.timeout_s, self.iface, self.verbose = timeout_s, _job_env.iface_from_nics(nics), verbose
        self.resources = resources or {"CPU": 1}
        self.extra_env_vars = dict(extra_env_vars or {})
        self.executable = executable or (None, None, None)  # (cls, args, kwargs) made in every actor
        self._secret = _job_env.new_secret()
        self._lock = threading.Lock()
        self._workers = []      # every worker started in this run, in start order
        self._results = {}      # worker id -> (rank, value) of the workers whose function returned
        self._failures = []     # (worker, text, traceback) in the order they came
        self._fn = None
        self._actor_cls = ray.remote(BaseHorovodWorker)

    # -- the run ------------------------------------------------------------------------------

    def run(self, worker_fn):
        """worker_fn(executable) on every worker of the job as it grows and shrinks, until one
        returns and horarun ends the job; the values of the workers that returned, in rank order.
        RunError when the job failed: horarun's reason, then what happened to which worker."""
        self._fn = elastic_call(worker_fn)
        listener = socket.create_server(("127.0.0.1", 0))
        acceptor = threading.Thread(target=self._accept, args=(listener,), name="hora-ray-elastic", daemon=True)
        acceptor.start()
        with tempfile.TemporaryDirectory(prefix="hora-ray-elastic-") as directory:
            hosts = HostsFile(self.discovery, directory)
            try:
                code, lines = self._run_horarun(hosts.path, listener.getsockname()[1])
            finally:
                hosts.close()
                listener.close()
                self._kill_actors()
        if code != 0:
            raise self._error(code, lines)
        ranked = sorted(self._results.values(), key=lambda rv: (rv[0] is None, rv[0]))
        return [value for _, value in ranked]

    def _horarun_command(self, hosts_path):
        command = [_horarun(), "-np", str(self.min_workers), "--min-np", str(self.min_workers),
                   "--host-discovery-script", "cat " + shlex.quote(hosts_path),
                   "--elastic-timeout", f"{self.elastic_timeout:g}"]
        if self.max_workers:
            command += ["--max-np", str(self.max_workers)]
        if self.reset_limit is not None:
            command += ["--reset-limit", str(self.reset_limit)]
        if self.cooldown_range:
            command += ["--blacklist-cooldown-range"] + [f"{float(s):g}" for s in self.cooldown_range]
        if self.iface:
            command += ["--network-interface", self.iface]
        if self.verbose and self.verbose >= 2:
            command += ["--verbose"]
        timeout = self.extra_env_vars.get("HORA_TIMEOUT_SECONDS", self.timeout_s)
        command += ["-x", f"HORA_TIMEOUT_SECONDS={timeout}"]
        return command + [sys.executable, "-m", "hora.ray._actor_proxy"]

    def _run_horarun(self, hosts_path, port):
        env = dict(os.environ, HORA_ELASTIC_WORKERS_HERE="1", HORA_RAY_DRIVER=f"127.0.0.1:{port}",
                   HORA_RAY_DRIVER_SECRET=self._secret)
        proc = subprocess.Popen(self._horarun_command(hosts_path), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                preexec_fn=_die_with_parent)
        lines = collections.deque(maxlen=KEPT_LINES)
        relays = [threading.Thread(target=_relay, args=(proc.stdout, sys.stdout, None), daemon=True),
                  threading.Thread(target=_relay, args=(proc.stderr, sys.stderr, lines), daemon=True)]
        for t in relays:
            t.start()
        try:
            # horarun bounds the job itself: --elastic-timeout for too few workers, the reset
            # limit, and every worker's end reported by its proxy.
            code = proc.wait()
        except BaseException:
            _stop(proc)
            raise
        for t in relays:
            t.join(timeout=5)
        return code, list(lines)

    def _error(self, code, lines):
        reasons = [line for line in lines if line.startswith("horarun:")]
        text = f"hora.ray: the elastic job failed (horarun exited with code {code})"
        if reasons:
            text += ": " + reasons[-1][len("horarun:"):].strip()
        with self._lock:
            failures = list(self._failures)
        if failures:
            text += "\nwhat happened to the workers, in order:\n" + "\n".join(f"  {t}" for _, t, _ in failures)
        first_traceback = next((tb for _, _, tb in failures if tb), None)
        if first_traceback:
            text += "\nTraceback of the first worker that raised:\n" + first_traceback
        return RunError(text, rank=failures[0][0].started_rank if failures else None,
                        remote_traceback=first_traceback, exit_code=code)

    # -- the proxies' service -----------------------------------------------------------------

    def _accept(self, listener):
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # closed: the run is over
            threading.Thread(target=self._serve, args=(sock,), name="hora-ray-proxy", daemon=True).start()

    def _serve(self, sock):
        """One proxy: place its worker, answer when the actor's function ends, and kill the
        actor when the proxy goes first (horarun stopped it)."""
        try:
            sock.settimeout(HELLO_TIMEOUT_S)
            channel = Channel.accept(sock, self._secret)
            _, worker_id, host, env = channel.recv()
            sock.settimeout(None)  # from here the connection lasts as long as the worker
        except (EOFError, OSError, ValueError) as e:
            log.warning("hora.ray: refused a proxy connection: %s: %s", type(e).__name__, e)
            sock.close()
            return
        worker = _Worker(worker_id, host, int(env.get("HORA_RANK", 0)))
        with self._lock:
            self._workers.append(worker)
        threading.Thread(target=self._place_and_watch, args=(worker, env, channel), name=f"hora-ray-{worker_id}",
                         daemon=True).start()
        try:
            channel.recv()  # the proxy says nothing more: this returns when it exits
        except (EOFError, OSError):
            pass
        finally:
            sock.close()
        if not worker.ended.is_set():
            worker.stopped = True  # not a failure of its own: its host was dropped, or the job ended
            if worker.actor is not None:
                log.info("hora.ray: %s was stopped by horarun; killing its actor", worker.name())
                ray.kill(worker.actor)

    def _place_and_watch(self, worker, env, channel):
        try:
            ref = self._place(worker, env)
            if worker.stopped:  # horarun stopped the proxy while the actor started
                ray.kill(worker.actor)
            code, text = self._outcome(worker, ref)
        except _PlacementError as e:
            code, text = 1, str(e)
            self._fail(worker, text)
        except Exception as e:  # a Ray call failed: the worker fails, not the driver's thread
            code, text = 1, f"hora.ray: {worker.name()}: {type(e).__name__}: {e}"
            self._fail(worker, text)
        worker.ended.set()
        try:
            channel.send((code, text))
        except OSError:
            pass  # the proxy is gone already (horarun stopped it)

    def _place(self, worker, env):
        """Starts the worker's actor on its host with its environment; its function's ObjectRef."""
        size = env.get("HORA_SIZE", "1")
        options = {"num_cpus": self.resources.get("CPU", 1), "num_gpus": self.resources.get("GPU", 0),
                   # Any node with the host's address: Ray's built-in resource of every node.
                   "resources": {f"node:{worker.host}": 0.001}, "max_restarts": 0}
        actor = self._actor_cls.options(**options).remote(
            world_rank=worker.started_rank, world_size=int(size))
        worker.actor = actor
        environment = dict(self.extra_env_vars)
        environment.update(env)
        cls, args, kwargs = self.executable
        ready = [actor.update_env_vars.remote(environment),
                 actor.start_executable.remote(cls, args, kwargs)]
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=self.timeout_s)
        if len(done) < len(ready):
            ray.kill(actor)
            raise _PlacementError(f"hora.ray: {worker.name()}: Ray did not start its actor within timeout_s="
                                  f"{self.timeout_s} s (is the node alive, with {self.resources} free?)")
        try:
            ray.get(ready)
        except ray.exceptions.RayError as e:
            ray.kill(actor)
            raise _PlacementError(f"hora.ray: {worker.name()}: its actor failed to start ({type(e).__name__}: "
                                  f"{_first_line(e)})")
        return actor.execute_reporting.remote(self._fn)

    def _outcome(self, worker, ref):
        """Waits for the worker's function (as long as training lasts: the actor's death or
        horarun's stopping the proxy, which kills the actor, ends the wait too); the proxy's
        exit code and text."""
        try:
            outcome = ray.get(ref)
        except ray.exceptions.RayError as e:
            if worker.stopped:
                return 1, ""
            text = f"hora.ray: {worker.name()} lost its Ray actor ({type(e).__name__}: {_first_line(e)})"
            self._fail(worker, text)
            return 1, text
        if outcome[0] == "ok":
            kind, rank, value = outcome[1]
            if kind == "done":
                with self._lock:
                    self._results[worker.id] = (rank, value)
            return 0, ""
        _, type_name, message, traceback, _, _, _ = outcome
        text = f"hora.ray: {worker.name()} raised {type_name}: {message}"
        self._fail(worker, text, traceback)
        return 1, text

    def _fail(self, worker, text, traceback=None):
        with self._lock:
            self._failures.append((worker, text, traceback))

    def _kill_actors(self):
        """Kills every actor of the run and waits (up to ACTORS_GONE_S) until Ray has seen each
        one's function end, so that their CPUs are free when run() returns."""
        with self._lock:
            workers = list(self._workers)
        for w in workers:
            if w.actor is not None:
                if not w.ended.is_set():
                    w.stopped = True  # the job is over: not a failure of its own
                ray.kill(w.actor)
        deadline = time.monotonic() + ACTORS_GONE_S
        for w in workers:
            if not w.ended.wait(timeout=max(0.0, deadline - time.monotonic())):
                log.warning("hora.ray: %s: Ray has not reported its killed actor dead after %g s", w.name(),
                            ACTORS_GONE_S)
                break


class _PlacementError(RuntimeError):
    pass


def _relay(stream, out, keep):
    """Copies horarun's lines to ``out`` until horarun closes the pipe; once ``out`` is closed
    (the caller gave up on the run) it only drains, so that horarun never blocks on a full pipe."""
    for line in stream:
        if keep is not None:
            keep.append(line.rstrip("\n"))
        try:
            out.write(line)
            out.flush()
        except (ValueError, OSError):
            pass


def _stop(proc):
    """SIGTERM to horarun (it stops its workers: the proxies, whose actors are then killed),
    SIGKILL after HORARUN_STOP_S."""
    proc.terminate()
    try:
        proc.wait(timeout=HORARUN_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=HORARUN_STOP_S)


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""
