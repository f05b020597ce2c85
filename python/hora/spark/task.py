"""What one Spark task of hora.spark.run does, on its executor: it registers with the driver,
receives its rank and environment, runs the rank as a child process (``python -m
hora._run_worker``, as horarun's workers do) and relays the child's output, outcome and exit
status to the driver.

The child dies with its task: it gets SIGKILL when the task's process dies (PR_SET_PDEATHSIG),
and the task kills it when the driver's connection closes (the run failed or was cancelled).
When the executor itself dies, PySpark's daemon hangs up its process group, which holds the task
and the child. So a cancelled or failed run leaves nothing running on the cluster.

A task of hora.spark.run_elastic (run_elastic_task) is a slot instead: it registers as idle on
its host, runs at most one rank when the driver hands it one, and fails when that rank failed,
so that Spark's retry of the task registers as a new slot.
"""

import base64
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import threading

from hora._channel import Channel, free_port
from hora.runner import RESULT_MARKER

_PR_SET_PDEATHSIG = 1


def connect(driver_address, secret, timeout):
    """The task's channel to the driver, and this host's address: the one by which it reaches the
    driver, which the other hosts reach too. The connection leaves from $SPARK_LOCAL_IP when the
    node sets it (the address Spark itself binds to on this node)."""
    local_ip = os.environ.get("SPARK_LOCAL_IP") or None
    try:
        channel = Channel.connect(driver_address, secret, timeout=timeout, source=local_ip)
    except OSError as e:
        if local_ip is None or e.errno != errno.EADDRNOTAVAIL:
            raise
        channel = Channel.connect(driver_address, secret, timeout=timeout)  # not an address of this host
    return channel, channel.socket.getsockname()[0]


def run_task(index, driver_address, secret, payload, start_timeout, executable):
    """Runs the rank of Spark partition ``index``; returns when the child has exited."""
    channel, host = connect(driver_address, secret, start_timeout)
    try:
        channel.send(("hello", index, host, socket.gethostname(), free_port(host), os.getpid()))
        channel.socket.settimeout(start_timeout)
        try:
            _, rank, rank_env = channel.recv()  # ("assign", rank, environment)
        except EOFError:
            return  # the driver gave up (start_timeout, another task failed): nothing to run
        channel.socket.settimeout(None)
        _run_rank(channel, rank, rank_env, payload, executable)
    finally:
        channel.close()


def run_elastic_task(index, attempt, driver_address, secret, payload, connect_timeout, executable):
    """One slot of hora.spark.run_elastic: registers as idle on its host, runs the rank the
    driver hands it, if any, and returns when that rank returned or the job is over. Raises when
    the rank failed, so that Spark retries the task, whose new attempt registers as a new slot."""
    channel, host = connect(driver_address, secret, connect_timeout)
    try:
        channel.send(("hello", (index, attempt), host, socket.gethostname(), 0, os.getpid()))
        # Idle for as long as the job runs: the driver's end, or its death, closes the connection.
        channel.socket.settimeout(None)
        try:
            _, rank, rank_env = channel.recv()  # ("assign", rank, environment)
        except (EOFError, OSError):
            return  # the job ended without needing this slot
        code, driver_left = _run_rank(channel, rank, rank_env, payload, executable)
    finally:
        channel.close()
    if code != 0 and not driver_left:
        worker = rank_env.get("HORA_ELASTIC_WORKER_ID", "?")
        raise RuntimeError(f"hora.spark.run_elastic: worker {worker} (started as rank {rank}) on {host} "
                           f"{_exit_text(code)}; Spark retries this task as a new slot")


def _exit_text(code):
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _run_rank(channel, rank, rank_env, payload, executable):
    """Runs the rank's child until it exits; its exit code, and whether the driver left first
    (and so had it killed)."""
    env = dict(os.environ)
    env.update(rank_env)
    # The payload goes through the child's stdin: no file to leave behind if the task is killed.
    env["HORA_RUN_PAYLOAD_FILE"] = "/dev/stdin"
    env["PYTHONUNBUFFERED"] = "1"  # output reaches the driver as it is written
    child = subprocess.Popen([executable or sys.executable, "-m", "hora._run_worker"], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_die_with_parent)
    channel.send(("started", rank, child.pid))
    pumps = [threading.Thread(target=_pump, args=(channel, rank, child.stdout, "stdout"), daemon=True),
             threading.Thread(target=_pump, args=(channel, rank, child.stderr, "stderr"), daemon=True)]
    for p in pumps:
        p.start()
    driver_left = threading.Event()
    threading.Thread(target=_kill_when_driver_leaves, args=(channel, child, driver_left), daemon=True).start()
    try:
        child.stdin.write(base64.b64encode(payload))
        child.stdin.close()
    except BrokenPipeError:
        pass  # the child died before reading it: its exit status says why
    code = child.wait()
    for p in pumps:
        p.join()
    try:
        channel.send(("exit", rank, code))
    except OSError:
        pass  # the driver is gone: nobody to tell
    return code, driver_left.is_set()


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _pump(channel, rank, stream, name):
    """Forwards the child's lines; its outcome line (hora._run_worker's) goes as its own message."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        marker = line.find(RESULT_MARKER) if name == "stdout" else -1
        try:
            if marker < 0:
                channel.send(("out", rank, name, line))
                continue
            if marker > 0:
                channel.send(("out", rank, name, line[:marker] + "\n"))
            _, data = line[marker + len(RESULT_MARKER):].split()
            channel.send(("outcome", rank, base64.b64decode(data)))
        except OSError:
            return  # the driver is gone; _kill_when_driver_leaves stops the child


def _kill_when_driver_leaves(channel, child, driver_left):
    try:
        channel.recv()  # the driver sends nothing more: this returns when it closes
    except (EOFError, OSError):
        pass
    if child.poll() is None:
        driver_left.set()
        child.kill()
