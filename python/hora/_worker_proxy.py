"""The process that horarun's elastic driver starts for each worker of an elastic job on Ray or
Spark (``python -m hora._worker_proxy``; docs/spark_ray.md, "Elastic training on Ray").

horarun believes it starts a worker; this process asks the runner's driver (hora._elastic_job,
reached at HORA_ELASTIC_DRIVER with HORA_ELASTIC_DRIVER_SECRET, both inherited from horarun's own
environment) to run the worker on the worker's host (a Ray actor, an idle Spark task), with the
worker's HORA_* environment, and then stands for that worker towards horarun:

- it exits with the code the driver sends when the worker's function ends: 0 when it returned or
  horarun removed the worker from the job, 1 when it raised or its process died (the driver's
  text, naming the worker, its host and what happened, goes to stderr, which horarun forwards);
- when horarun stops it (SIGTERM: its host was removed or blacklisted, or the job ended), it
  dies and its connection closes, and the driver stops the worker.

It imports neither Ray, Spark nor a frontend, so that it starts in a fraction of a second.
"""

import os
import sys

from hora._channel import Channel

# How long the driver's service may take to accept the connection (it is on this machine).
CONNECT_TIMEOUT_S = 10.0

# Variables of horarun's environment that concern this proxy and not the worker.
_PROXY_ONLY = ("HORA_ELASTIC_DRIVER", "HORA_ELASTIC_DRIVER_SECRET", "HORA_ELASTIC_WORKERS_HERE")


def worker_environment(environ):
    """The variables the worker gets: hora's and Horovod's (horarun's rank variables, the store,
    the secret, the elastic worker id, the -x knobs) and PYTHONUNBUFFERED."""
    return {k: v for k, v in environ.items()
            if (k.startswith(("HORA_", "HOROVOD_")) or k == "PYTHONUNBUFFERED") and k not in _PROXY_ONLY}


def main():
    worker_id = os.environ.get("HORA_ELASTIC_WORKER_ID", "?")
    host, port = os.environ["HORA_ELASTIC_DRIVER"].rsplit(":", 1)
    channel = Channel.connect((host, int(port)), os.environ["HORA_ELASTIC_DRIVER_SECRET"], timeout=CONNECT_TIMEOUT_S)
    # The answer comes when the worker's function ends, which is training's length: no deadline
    # here, but the driver's death closes the connection (EOFError) at once.
    channel.socket.settimeout(None)
    channel.send(("start", worker_id, os.environ["HORA_HOSTNAME"], worker_environment(os.environ)))
    try:
        code, text = channel.recv()
    except (EOFError, OSError) as e:
        print(f"hora: worker {worker_id}: lost the elastic job's driver ({type(e).__name__}: {e})", file=sys.stderr,
              flush=True)
        return 1
    if text:
        print(text, file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
