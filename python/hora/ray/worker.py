"""The Ray actor that is one rank of a RayExecutor job (horovod.ray's BaseHorovodWorker).

The actor's process is the rank: RayExecutor.start sets its HORA_* environment
(hora._job_env), and the first `hvd.init()` of any frontend in a function it runs joins the job;
hora stays initialised for the actor's life, across run() calls, as on Horovod. Ray prefixes
the actor's output with its repr, ``(HoraWorker(rank=1) pid=...)``.
"""

import os
import socket

from hora import _departure
from hora._channel import free_port
from hora._run_worker import outcome_of


class BaseHorovodWorker:
    def __init__(self, world_rank=0, world_size=1):
        self.rank = world_rank
        self.size = world_size
        self.executable = None

    def node(self):
        """(address, hostname): the address is the host's identity for hora's local ranks."""
        import ray

        return ray.util.get_node_ip_address(), socket.gethostname()

    def free_port(self, host):
        return free_port(host)

    def pid(self):
        return os.getpid()

    def update_env_vars(self, env_vars):
        os.environ.update({k: str(v) for k, v in env_vars.items()})
        self.rank = int(os.environ.get("HORA_RANK", self.rank))
        self.size = int(os.environ.get("HORA_SIZE", self.size))

    def env_vars(self):
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=None, executable_kwargs=None):
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []), **(executable_kwargs or {}))

    def execute(self, fn):
        """``fn(self.executable)``, raising what it raises (RayExecutor.run_remote's refs)."""
        try:
            return fn(self.executable)
        except BaseException as e:
            # The other ranks' pending collectives fail naming this rank, rather than wait.
            _departure.leave(f"is exiting: its RayExecutor function raised {type(e).__name__}: {e}")
            raise

    def execute_reporting(self, fn):
        """``fn(self.executable)``'s outcome (hora._run_worker.outcome_of), for RayExecutor.run."""
        return outcome_of(lambda: fn(self.executable))

    def __repr__(self):
        return f"HoraWorker(rank={self.rank})"
