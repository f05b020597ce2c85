"""What one Spark task of hora.spark.run does, on its executor: it registers with the driver,
receives its rank and environment, runs the rank as a child process (``python -m
hora._run_worker``, as horarun's workers do) and relays the child's output, outcome and exit
status to the driver.

The child dies with its task: it gets SIGKILL when the task's process dies (PR_SET_PDEATHSIG),
and the task kills it when the driver's connection closes (the run failed or was cancelled).
When the executor itself dies, PySpark's daemon hangs up its process group, which holds the task
and the child. So a cancelled or failed run leaves nothing running on the cluster.
"""

import base64
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading

from hora._channel import Channel, free_port
from hora.runner import RESULT_MARKER

_PR_SET_PDEATHSIG = 1


def run_task(index, driver_address, secret, payload, start_timeout, executable):
    """Runs the rank of Spark partition ``index``; returns when the child has exited."""
    channel = Channel.connect(driver_address, secret, timeout=start_timeout)
    try:
        # The address by which this host reaches the driver is one the other hosts reach too.
        host = channel.socket.getsockname()[0]
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


def _run_rank(channel, rank, rank_env, payload, executable):
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
    threading.Thread(target=_kill_when_driver_leaves, args=(channel, child), daemon=True).start()
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


def _kill_when_driver_leaves(channel, child):
    try:
        channel.recv()  # the driver sends nothing more: this returns when it closes
    except (EOFError, OSError):
        pass
    if child.poll() is None:
        child.kill()
