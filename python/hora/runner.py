"""hora.run: run a function on N workers and collect what each returns.

The function and its arguments are pickled with cloudpickle (so closures and lambdas work) and
handed to every worker through its environment; each worker started by horarun unpickles and
calls it, then prints its pickled outcome as one marked line on stdout, which horarun forwards
with the rank prefix. The caller collects those lines and passes every other line through, so
the workers' output appears as with horarun.
"""

import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import cloudpickle

# What a worker prints last: the marker (after a record separator, so that output it wrote
# without a final newline stays on the line before it), its rank and its base64-pickled outcome.
RESULT_MARKER = "\x1eHORA_RUN_RESULT"
_RESULT_LINE = re.compile(r"^\[(\d+)\]<stdout>:(.*)" + RESULT_MARKER + r" (\d+) (\S+)$")
# horarun's last line when a worker failed: which rank left first, and how.
_FIRST_EXIT = re.compile(r"^horarun: rank (\d+) on host \S+ (.*); the other ranks were stopped$")
# Payloads above this go through a file (an environment string is limited to 128 KiB).
_INLINE_PAYLOAD_LIMIT = 100_000


class RunError(RuntimeError):
    """A worker of hora.run failed. ``rank`` is the failed worker's rank (or None when horarun
    failed before any worker reported), ``remote_traceback`` the worker's formatted traceback,
    and ``__cause__`` the worker's exception itself when it could be unpickled."""

    def __init__(self, message, rank=None, remote_traceback=None, exit_code=None):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.exit_code = exit_code


def _horarun():
    explicit = os.environ.get("HORA_HORARUN")
    if explicit:
        return explicit
    beside = os.path.join(os.path.dirname(sys.executable), "horarun")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("horarun")
    if not found:
        raise RunError("hora.run needs horarun: put it on PATH or set HORA_HORARUN")
    return found


def _host_flag(hosts):
    if hosts is None:
        return []
    if isinstance(hosts, str):
        return ["-H", hosts]
    return ["-H", ",".join(f"{h}:{n}" for h, n in hosts)]


def run(fn, args=(), kwargs=None, np=1, hosts=None, env=None, *, hostfile=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, executable=None, verbose=False):
    """Runs ``fn(*args, **kwargs)`` on ``np`` workers and returns the list of their return
    values in rank order.

    ``hosts``: "a:2,b:2" or [("a", 2), ("b", 2)] (default: this host); the working directory must
    exist on every host, and be shared when the pickled function exceeds 100 KB. ``hostfile``:
    horarun's --hostfile, instead of ``hosts``. ``env``: extra environment variables for the
    workers. An exception in any worker is raised here as
    RunError naming the rank, with the worker's traceback; the other workers are stopped. The
    RunError leads with the root cause (the first rank whose function raised, or that left
    first) and lists the other ranks' consequential errors after it.
    """
    if np < 1:
        raise ValueError(f"np must be at least 1, got {np}")
    payload = base64.b64encode(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))).decode()
    command = [_horarun(), "-np", str(np)] + _host_flag(hosts)
    if hostfile is not None:
        command += ["--hostfile", str(hostfile)]
    if start_timeout is not None:
        command += ["--start-timeout", str(start_timeout)]
    if ssh_port is not None:
        command += ["-p", str(ssh_port)]
    if ssh_identity_file is not None:
        command += ["-i", ssh_identity_file]
    if verbose:
        command.append("--verbose")
    child_env = dict(os.environ)
    # Functions and classes of the caller's modules are pickled by reference: the workers import
    # them from the caller's module path.
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    command += ["-x", "PYTHONPATH"]
    for key, value in (env or {}).items():
        child_env[key] = str(value)
        command += ["-x", key]
    payload_dir = None
    if len(payload) <= _INLINE_PAYLOAD_LIMIT:
        child_env["HORA_RUN_PAYLOAD"] = payload
        command += ["-x", "HORA_RUN_PAYLOAD"]
    else:
        payload_dir = tempfile.mkdtemp(prefix=".hora-run-", dir=os.getcwd())
        path = os.path.join(payload_dir, "payload")
        with open(path, "w") as f:
            f.write(payload)
        child_env["HORA_RUN_PAYLOAD_FILE"] = path
        command += ["-x", "HORA_RUN_PAYLOAD_FILE"]
    command += [executable or sys.executable, "-m", "hora._run_worker"]

    outcomes = {}
    first_exit = []  # (rank, "exited with code 9"), from horarun's stderr
    try:
        with subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              bufsize=1) as proc:
            forwarder = threading.Thread(target=_forward_stderr, args=(proc.stderr, first_exit), daemon=True)
            forwarder.start()
            for line in proc.stdout:
                match = _RESULT_LINE.match(line.rstrip("\n"))
                if match:
                    if match.group(2):
                        sys.stdout.write(f"[{match.group(1)}]<stdout>:{match.group(2)}\n")
                    outcomes[int(match.group(3))] = cloudpickle.loads(base64.b64decode(match.group(4)))
                else:
                    sys.stdout.write(line)
            code = proc.wait()
            forwarder.join()
    finally:
        if payload_dir:
            shutil.rmtree(payload_dir, ignore_errors=True)

    missing = [r for r in range(np) if r not in outcomes]
    if any(o[0] == "error" for o in outcomes.values()) or (first_exit and first_exit[0][0] in missing):
        _raise_root_cause(outcomes, missing, first_exit[0] if first_exit else None, code)
    if code != 0 or missing:
        raise RunError(f"horarun exited with code {code}; ranks {missing} returned no result "
                       "(see the output above for the reason)", rank=missing[0] if missing else None,
                       exit_code=code)
    return [outcomes[r][1] for r in range(np)]


def _forward_stderr(stream, first_exit):
    """Passes horarun's stderr through, noting which rank it saw leave first."""
    for line in stream:
        sys.stderr.write(line)
        match = _FIRST_EXIT.match(line.rstrip("\n"))
        if match and not first_exit:
            first_exit.append((int(match.group(1)), match.group(2)))


def _raise_root_cause(outcomes, missing, first_exit, code, stopped_by="horarun"):
    """Raises RunError leading with the root cause, then the other ranks' consequential errors.

    The root cause is the earliest error that is not hora's report of another rank leaving
    (PeerError, ShutdownError); failing that, the rank horarun saw leave first, even when it
    reported nothing (killed, os._exit); failing that, the earliest error. hora.spark reports
    its tasks' failures through here too (``stopped_by`` names who stopped the other ranks)."""
    errors = {r: o for r, o in outcomes.items() if o[0] == "error"}
    by_time = sorted(errors, key=lambda r: errors[r][5])
    roots = [r for r in by_time if not errors[r][6]]
    if roots:
        lead = roots[0]
    elif first_exit is not None:
        lead = first_exit[0]
    else:
        lead = by_time[0]
    if lead in errors:
        _, type_name, text, tb, exc_bytes = errors[lead][:5]
        head = f"rank {lead} raised {type_name}: {text}\n\nTraceback on rank {lead}:\n{tb}"
    else:
        tb, exc_bytes = None, None
        head = f"rank {lead} {first_exit[1]} before returning a result (see its output above)"
    then = [f"  rank {r} raised {errors[r][1]}: {(errors[r][2].splitlines() or [''])[0]}" for r in by_time if r != lead]
    then += [f"  rank {r} returned no result (stopped by {stopped_by})" for r in missing if r != lead]
    message = head + ("\nThen, as a consequence:\n" + "\n".join(then) if then else "")
    cause = None
    if exc_bytes is not None:
        try:
            cause = cloudpickle.loads(exc_bytes)
        except Exception:  # the exception's class may not exist here
            cause = None
    raise RunError(message, rank=lead, remote_traceback=tb, exit_code=code) from cause
