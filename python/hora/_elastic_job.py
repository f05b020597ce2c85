"""One run of an elastic hora job on a cluster manager (Ray's nodes, Spark's tasks): horarun's
elastic driver decides, the cluster manager places (docs/spark_ray.md, "Elastic training on Ray"
and "Elastic training on Spark").

ElasticJob.run() starts horarun in elastic mode as a child process, with
- a discovery script that prints the host list a HostsFile keeps from the runner's discovery;
- HORA_ELASTIC_WORKERS_HERE=1, so that horarun starts every worker on this machine whatever its
  host; the worker command is hora._worker_proxy, which asks this object's service to run the
  worker on its host, and exits as the worker's function ends.

horarun serves the rendezvous store, forms the generations, blacklists failed hosts and applies
min/max workers, the reset limit, the elastic timeout and the cooldowns, exactly as for jobs on
ssh hosts. A runner subclasses ElasticJob with three things: how to start a worker on its host
and wait for its end (_launch), how to stop one whose proxy horarun stopped (_stop_worker), and
what to clean up once horarun exited (_end).
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

from hora import _job_env
from hora._channel import Channel
from hora.runner import RunError, _horarun

log = logging.getLogger("hora")

# How long a proxy may take to say which worker it is, once connected.
HELLO_TIMEOUT_S = 10.0
# How long horarun gets to stop its workers after SIGTERM before it is killed.
HORARUN_STOP_S = 10.0
# horarun's lines kept for the error message of a failed job.
KEPT_LINES = 40
# How often HostsFile asks the discovery (horarun reads the file every second).
REFRESH_S = 0.5

# Looked up here, not in the forked child, where loading a library could meet a lock that
# another of the driver's threads held at the fork.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child before exec: horarun gets SIGTERM when the thread that started it ends, so
    that neither it nor its workers outlive a driver that was killed."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def elastic_call(fn):
    """``fn`` wrapped for an elastic worker: ("done", rank, value) when it returned, with the
    worker's rank in the last generation; ("left", None, None) when horarun removed the worker
    (hora.common.elastic.rejoin exits with code 0). Other exceptions propagate."""

    def call(*args, **kwargs):
        try:
            value = fn(*args, **kwargs)
        except SystemExit as e:
            if e.code in (None, 0):
                return ("left", None, None)
            raise
        from hora.common import basics

        rank = basics.rank() if basics.is_initialized() else None
        return ("done", rank, value)

    return call


def hosts_text(hosts):
    """horarun's discovery format: ``host:slots`` per line."""
    return "".join(f"{host}:{slots}\n" for host, slots in hosts.items())


class HostsFile:
    """The discovery's answer (``find_available_hosts_and_slots()``: {host: slots}) in a file,
    rewritten (atomically, by rename) every REFRESH_S by a daemon thread until close(), so that
    horarun's every-second ``cat`` costs no call to the cluster manager. A discovery that raises
    leaves the last answer in place."""

    def __init__(self, discovery, directory):
        self._discovery = discovery
        self.path = os.path.join(directory, "hosts")
        self._stop = threading.Event()
        self.refresh()  # the first answer is there before horarun reads it
        self._thread = threading.Thread(target=self._loop, name="hora-elastic-discovery", daemon=True)
        self._thread.start()

    def refresh(self):
        hosts = self._discovery.find_available_hosts_and_slots()
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".hosts")
        with os.fdopen(fd, "w") as f:
            f.write(hosts_text(hosts))
        os.replace(tmp, self.path)
        return hosts

    def _loop(self):
        while not self._stop.wait(REFRESH_S):
            try:
                self.refresh()
            except Exception as e:  # the cluster manager unreachable for a moment: keep the last answer
                log.warning("hora: host discovery failed (%s: %s); keeping the last host list", type(e).__name__, e)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)


class WorkerError(RuntimeError):
    """A worker could not be started; the message names it and says why."""


class Worker:
    """What the driver knows of one elastic worker: horarun's id (host:slot), its host, the place
    it started in (HORA_RANK); the runner keeps its own handle (an actor, a Spark task) in it."""

    def __init__(self, worker_id, host, started_rank, where):
        self.id = worker_id
        self.host = host
        self.started_rank = started_rank
        self.where = where              # "node" (Ray) or "host" (Spark), for messages
        self.handle = None
        self.ended = threading.Event()  # its function ended (or it could not start)
        self.stopped = False            # horarun stopped its proxy first

    def name(self):
        return f"worker {self.id} (started as rank {self.started_rank}) on {self.where} {self.host}"


class ElasticJob:
    """min_workers, num_workers, max_workers, reset_limit, cooldown_range and elastic_timeout are
    horarun's --min-np, -np, --max-np, --reset-limit, --blacklist-cooldown-range and
    --elastic-timeout; ``timeout_s`` (if not None) the ranks' HORA_TIMEOUT_SECONDS; ``extra_env``
    variables every worker gets. ``who`` and ``where`` name the runner and its hosts in messages."""

    who = "hora"
    where = "host"

    def __init__(self, discovery, *, min_workers, num_workers=None, max_workers=None, reset_limit=None,
                 cooldown_range=None, elastic_timeout=600, timeout_s=None, nics=None, verbose=1, extra_env=None):
        self.discovery = discovery
        self.min_workers, self.num_workers, self.max_workers = min_workers, num_workers or min_workers, max_workers
        self.reset_limit, self.cooldown_range, self.elastic_timeout = reset_limit, cooldown_range, elastic_timeout
        self.timeout_s, self.iface, self.verbose = timeout_s, _job_env.iface_from_nics(nics), verbose
        self.extra_env = {k: str(v) for k, v in (extra_env or {}).items()}
        self._secret = _job_env.new_secret()
        self._lock = threading.Lock()
        self._workers = []      # every worker started in this run, in start order
        self._results = {}      # worker id -> (rank, value) of the workers whose function returned
        self._failures = []     # (worker, text, traceback) in the order they came
        self._proc = None       # horarun, while it runs
        self._aborted = None    # why the runner stopped horarun itself (abort())

    # -- what a runner provides -----------------------------------------------------------------

    def _launch(self, worker, env):
        """Starts ``worker`` on its host with ``env`` (its HORA_* variables and extra_env) and
        waits for its end; the proxy's exit code and text. Raises WorkerError if it cannot start."""
        raise NotImplementedError

    def _stop_worker(self, worker):
        """Stops a worker whose proxy horarun stopped (its host dropped, or the job over)."""
        raise NotImplementedError

    def _end(self):
        """Once horarun exited: stop whatever of the run is left on the cluster."""

    # -- the run ---------------------------------------------------------------------------------

    def run(self):
        """Runs the job until horarun ends it; the values of the workers whose function returned,
        in rank order. RunError when the job failed: horarun's reason, then what happened to
        which worker."""
        listener = socket.create_server(("127.0.0.1", 0))
        acceptor = threading.Thread(target=self._accept, args=(listener,), name="hora-elastic", daemon=True)
        acceptor.start()
        with tempfile.TemporaryDirectory(prefix="hora-elastic-") as directory:
            hosts = HostsFile(self.discovery, directory)
            try:
                code, lines = self._run_horarun(hosts.path, listener.getsockname()[1])
            finally:
                hosts.close()
                listener.close()
                self._end()
        if code != 0:
            raise self._error(code, lines)
        ranked = sorted(self._results.values(), key=lambda rv: (rv[0] is None, rv[0]))
        return [value for _, value in ranked]

    def abort(self, why):
        """Ends the job from the runner's side (its cluster job failed): horarun stops its workers."""
        self._aborted = why
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def _horarun_command(self, hosts_path):
        command = [_horarun(), "-np", str(self.num_workers), "--min-np", str(self.min_workers),
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
        timeout = self.extra_env.get("HORA_TIMEOUT_SECONDS", self.timeout_s)
        if timeout is not None:
            command += ["-x", f"HORA_TIMEOUT_SECONDS={timeout}"]
        return command + [sys.executable, "-m", "hora._worker_proxy"]

    def _run_horarun(self, hosts_path, port):
        # The service's address and secret reach the proxies through horarun's environment,
        # never a command line.
        env = dict(os.environ, HORA_ELASTIC_WORKERS_HERE="1", HORA_ELASTIC_DRIVER=f"127.0.0.1:{port}",
                   HORA_ELASTIC_DRIVER_SECRET=self._secret)
        proc = subprocess.Popen(self._horarun_command(hosts_path), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                preexec_fn=_die_with_parent)
        self._proc = proc
        if self._aborted:  # abort() came before horarun started
            proc.terminate()
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
        finally:
            self._proc = None
        for t in relays:
            t.join(timeout=5)
        return code, list(lines)

    def _error(self, code, lines):
        reasons = [line for line in lines if line.startswith("horarun:")]
        text = f"{self.who}: the elastic job failed (horarun exited with code {code})"
        if self._aborted:
            text += f": {self._aborted}"
        elif reasons:
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

    def _fail(self, worker, text, traceback=None):
        with self._lock:
            self._failures.append((worker, text, traceback))

    def _returned(self, worker, rank, value):
        with self._lock:
            self._results[worker.id] = (rank, value)

    def workers(self):
        with self._lock:
            return list(self._workers)

    # -- the proxies' service --------------------------------------------------------------------

    def _accept(self, listener):
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # closed: the run is over
            threading.Thread(target=self._serve, args=(sock,), name="hora-elastic-proxy", daemon=True).start()

    def _serve(self, sock):
        """One proxy: start its worker, answer when the worker's function ends, and stop the
        worker when the proxy goes first (horarun stopped it)."""
        try:
            sock.settimeout(HELLO_TIMEOUT_S)
            channel = Channel.accept(sock, self._secret)
            _, worker_id, host, env = channel.recv()
            sock.settimeout(None)  # from here the connection lasts as long as the worker
        except (EOFError, OSError, ValueError) as e:
            log.warning("%s: refused a proxy connection: %s: %s", self.who, type(e).__name__, e)
            sock.close()
            return
        worker = Worker(worker_id, host, int(env.get("HORA_RANK", 0)), self.where)
        with self._lock:
            self._workers.append(worker)
        environment = dict(self.extra_env)
        environment.update(env)
        threading.Thread(target=self._launch_and_report, args=(worker, environment, channel),
                         name=f"hora-elastic-{worker_id}", daemon=True).start()
        try:
            channel.recv()  # the proxy says nothing more: this returns when it exits
        except (EOFError, OSError):
            pass
        finally:
            sock.close()
        if not worker.ended.is_set():
            worker.stopped = True  # not a failure of its own: its host was dropped, or the job ended
            log.info("%s: %s was stopped by horarun", self.who, worker.name())
            self._stop_worker(worker)

    def _launch_and_report(self, worker, env, channel):
        try:
            code, text = self._launch(worker, env)
        except WorkerError as e:
            code, text = 1, str(e)
            self._fail(worker, text)
        except Exception as e:  # a call to the cluster failed: the worker fails, not the driver's thread
            code, text = 1, f"{self.who}: {worker.name()}: {type(e).__name__}: {e}"
            self._fail(worker, text)
        worker.ended.set()
        try:
            channel.send((code, text))
        except OSError:
            pass  # the proxy is gone already (horarun stopped it)


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
    """SIGTERM to horarun (it stops its workers, the proxies, whose workers are then stopped),
    SIGKILL after HORARUN_STOP_S."""
    proc.terminate()
    try:
        proc.wait(timeout=HORARUN_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=HORARUN_STOP_S)


def first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""
