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
# The prefix is horarun's label of the worker: its rank, or in an elastic job its id before it has one.
_RESULT_LINE = re.compile(r"^\[([^\]]+)\]<stdout>:(.*)" + RESULT_MARKER + r" (\d+) (\S+)$")
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
        ssh_identity_file=None, executable=None, verbose=False, output_filename=None, min_np=None, max_np=None,
        slots=None, host_discovery_script=None, reset_limit=None, cooldown_range=None, elastic_timeout=None):
    """Runs ``fn(*args, **kwargs)`` on ``np`` workers and returns the list of their return
    values in rank order.

    ``hosts``: "a:2,b:2" or [("a", 2), ("b", 2)] (default: this host); the working directory must
    exist on every host, and be shared when the pickled function exceeds 100 KB. ``hostfile``:
    horarun's --hostfile, instead of ``hosts``. ``env``: extra environment variables for the
    workers. ``output_filename``: horarun's --output-filename (each rank's output in a file too).
    An exception in any worker is raised here as RunError naming the rank, with the worker's
    traceback; the other workers are stopped. The RunError leads with the root cause (the first
    rank whose function raised, or that left first) and lists the other ranks' consequential
    errors after it.

    Elastic (any of ``min_np``, ``max_np``, ``host_discovery_script``; ``slots``,
    ``reset_limit``, ``cooldown_range`` and ``elastic_timeout`` as horarun's flags): the job
    re-forms when workers fail or hosts come and go (``fn`` wraps its training in
    ``hvd.elastic.run``), and the result is the list of what the workers of its last generation
    returned, in the ranks they ended with. A worker that failed and left the job is reported on
    stderr, not raised: the job went on without it.
    """
    if np < 1:
        raise ValueError(f"np must be at least 1, got {np}")
    elastic = min_np is not None or max_np is not None or host_discovery_script is not None
    command = [_horarun(), "-np", str(np)] + _host_flag(hosts) + _flags(
        hostfile=hostfile, start_timeout=start_timeout, ssh_port=ssh_port, ssh_identity_file=ssh_identity_file,
        output_filename=output_filename, min_np=min_np, max_np=max_np, slots=slots,
        host_discovery_script=host_discovery_script, reset_limit=reset_limit, cooldown_range=cooldown_range,
        elastic_timeout=elastic_timeout)
    if verbose:
        command.append("--verbose")
    payload = base64.b64encode(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))).decode()
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
    try:
        reports, first_exit, code = _collect(command, child_env)
    finally:
        if payload_dir:
            shutil.rmtree(payload_dir, ignore_errors=True)
    if elastic:
        return _elastic_results(reports, first_exit, code)
    return _static_results(dict(reports), np, first_exit, code)


# hora.run's launcher flags: (keyword, horarun's flag); None values are left out, lists give one
# argument per item.
_FLAGS = (("hostfile", "--hostfile"), ("start_timeout", "--start-timeout"), ("ssh_port", "-p"),
          ("ssh_identity_file", "-i"), ("output_filename", "--output-filename"), ("min_np", "--min-np"),
          ("max_np", "--max-np"), ("slots", "--slots-per-host"), ("host_discovery_script", "--host-discovery-script"),
          ("reset_limit", "--reset-limit"), ("cooldown_range", "--blacklist-cooldown-range"),
          ("elastic_timeout", "--elastic-timeout"))


def _flags(**given):
    command = []
    for keyword, flag in _FLAGS:
        value = given[keyword]
        if value is not None:
            command += [flag, *map(str, value if isinstance(value, (list, tuple)) else [value])]
    return command


def _collect(command, child_env):
    """Runs horarun, passing its output through; returns the workers' (rank, outcome) reports in
    the order they came, the rank horarun saw leave first (with how) and horarun's exit code."""
    reports = []
    first_exit = []  # (rank, "exited with code 9"), from horarun's stderr
    with subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          bufsize=1) as proc:
        forwarder = threading.Thread(target=_forward_stderr, args=(proc.stderr, first_exit), daemon=True)
        forwarder.start()
        for line in proc.stdout:
            match = _RESULT_LINE.match(line.rstrip("\n"))
            if match:
                if match.group(2):
                    sys.stdout.write(f"[{match.group(1)}]<stdout>:{match.group(2)}\n")
                reports.append((int(match.group(3)), cloudpickle.loads(base64.b64decode(match.group(4)))))
            else:
                sys.stdout.write(line)
        code = proc.wait()
        forwarder.join()
    return reports, first_exit[0] if first_exit else None, code


def _static_results(outcomes, np, first_exit, code):
    missing = [r for r in range(np) if r not in outcomes]
    if any(o[0] == "error" for o in outcomes.values()) or (first_exit and first_exit[0] in missing):
        _raise_root_cause(outcomes, missing, first_exit, code)
    if code != 0 or missing:
        raise RunError(f"horarun exited with code {code}; ranks {missing} returned no result "
                       "(see the output above for the reason)", rank=missing[0] if missing else None,
                       exit_code=code)
    return [outcomes[r][1] for r in range(np)]


def _elastic_results(reports, first_exit, code):
    """What the last generation returned: the job ended well (horarun's code 0) once its workers
    returned. Workers that failed before then left the job, which went on without them."""
    returned = {rank: outcome for rank, outcome in reports if outcome[0] == "ok"}
    failed = {rank: outcome for rank, outcome in reports if outcome[0] == "error"}
    if code != 0:
        if failed:
            _raise_root_cause(failed, [], first_exit, code)
        raise RunError(f"horarun exited with code {code}; the elastic job ended without a result "
                       "(see the output above for the reason)", exit_code=code)
    for rank, outcome in failed.items():
        sys.stderr.write(f"hora.run: a worker (rank {rank} when it failed) raised {outcome[1]}: {outcome[2]}; "
                         "the elastic job went on without it\n")
    return [returned[rank][1] for rank in sorted(returned)]


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
