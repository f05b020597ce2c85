"""RayExecutor: a hora job whose ranks are Ray actors, with horovod.ray's API.

start() places the actors (hora.ray.placement), one rank per bundle in order, asks rank 0's
actor for a free port on its node and gives every actor its HORA_* environment
(hora._job_env): rank 0 serves the store; the secret is made here and travels only through
Ray's calls. run() calls the function on every actor and waits for whichever finishes first,
so a rank that raises or whose actor dies ends the run at once with a RunError naming the rank
and its node (and the traceback); the executor's actors are then killed, and another run needs
a new start().

With min_workers the executor is elastic (hora.ray.elastic.ElasticMode): every run is an
elastic job whose workers come and go with Ray's nodes; run_remote and execute_single, which
need a fixed set of actors, are refused there as in horovod.ray.
"""

import dataclasses
import time
from typing import Optional

import ray

from hora import _job_env
import hora.ray.placement as placement
from hora.ray import ray_logger
from hora.ray.worker import BaseHorovodWorker
from hora.runner import _raise_root_cause
from hora.ray.elastic import ElasticMode


@dataclasses.dataclass
class MiniSettings:
    """What RayExecutor.create_settings returns (horovod.ray's MiniSettings)."""

    timeout_s: int = 30
    placement_group_timeout_s: int = 100
    nics: Optional[set] = None
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None
    verbose: int = 1
    elastic: bool = False
    discovery: object = None  # with override_discovery=False: the elastic job's host discovery


class RayExecutor:
    @classmethod
    def create_settings(cls, timeout_s=30, ssh_identity_file=None, ssh_str=None, placement_group_timeout_s=100,
                        nics=None, verbose=1):
        """``timeout_s``: hora's deadline for the ranks to connect and for any collective to
        progress (HORA_TIMEOUT_SECONDS). ``placement_group_timeout_s``: how long start() waits
        for Ray to place the actors. ``nics``: one interface name for hora's connections. The ssh
        arguments are accepted for compatibility and unused: hora needs no ssh on Ray."""
        return MiniSettings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s, nics=nics,
                            ssh_identity_file=ssh_identity_file, ssh_str=ssh_str, verbose=verbose)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=1, cpus_per_worker=1,
                 use_gpu=False, gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True):
        if max_workers is not None and (not min_workers or min_workers <= 0):
            raise ValueError("RayExecutor: max_workers needs a positive min_workers (elastic mode)")
        if min_workers is not None and (num_workers is not None or num_hosts is not None):
            raise ValueError("RayExecutor: give min_workers (elastic) or num_workers/num_hosts (fixed), not both")
        if gpus_per_worker and not use_gpu:
            raise ValueError("RayExecutor: gpus_per_worker is set but use_gpu is False")
        self._elastic = None
        if min_workers is not None:
            if min_workers <= 0:
                raise ValueError(f"RayExecutor: min_workers={min_workers} must be positive")
            self.settings = settings
            self._elastic = ElasticMode(settings, min_workers, max_workers, reset_limit, cooldown_range,
                                        elastic_timeout, override_discovery, cpus_per_worker, use_gpu,
                                        gpus_per_worker)
            self.workers, self.hosts, self._group = [], [], None
            return
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("RayExecutor: give either num_workers, or num_hosts with num_workers_per_host")
        self.settings = settings
        self.num_workers = num_workers if num_workers is not None else num_hosts * num_workers_per_host
        self.num_hosts, self.num_workers_per_host = num_hosts, num_workers_per_host
        self.resources = placement.worker_resources(cpus_per_worker, (gpus_per_worker or 1) if use_gpu else 0)
        self.workers = []  # actor handles in rank order
        self.hosts = []    # each rank's node address
        self._group = None

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Places the actors, gives them their ranks and instantiates ``executable_cls`` in each.
        Elastic: waits up to elastic_timeout for min_workers slots; each run makes its actors."""
        if self._elastic is not None:
            return self._elastic.start(executable_cls, executable_args, executable_kwargs, extra_env_vars)
        if self.workers:
            raise RuntimeError("RayExecutor.start: already started; call shutdown() first")
        timeout = self.settings.placement_group_timeout_s
        self._group, bundle_of = placement.create(self.num_workers, self.num_hosts, self.num_workers_per_host,
                                                  self.resources, timeout)
        try:
            actor_cls = ray.remote(BaseHorovodWorker)
            actors = [actor_cls.options(num_cpus=self.resources["CPU"], num_gpus=self.resources.get("GPU", 0),
                                        scheduling_strategy=placement.scheduling(self._group, bundle))
                      .remote(world_rank=rank, world_size=self.num_workers) for rank, bundle in enumerate(bundle_of)]
            # Ranks in the bundles' order, as horovod.ray: Ray fixes each actor's log prefix (its
            # repr, naming the rank) when it starts, before anyone knows its node.
            self.workers = actors
            self.hosts = [address for address, _ in self._get([a.node.remote() for a in actors], "report its node")]
            port = self._get([self.workers[0].free_port.remote(self.hosts[0])], "pick the store's port")[0]
            secret = _job_env.new_secret()
            iface = _job_env.iface_from_nics(self.settings.nics)
            calls = []
            for rank, actor in enumerate(self.workers):
                env = {"HORA_TIMEOUT_SECONDS": str(self.settings.timeout_s)}
                env.update(extra_env_vars or {})
                env.update(_job_env.rank_environment(rank, self.num_workers, self.hosts[rank], self.hosts[0], port,
                                                     secret, iface))
                calls.append(actor.update_env_vars.remote(env))
            self._get(calls, "take its environment")
            self._get([a.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                       for a in self.workers], "start its executable")
        except BaseException:
            self.shutdown()
            raise

    def _get(self, refs, what):
        """ray.get within the settings' timeout; TimeoutError naming the step otherwise."""
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.settings.timeout_s)
        if len(ready) < len(refs):
            raise TimeoutError(f"RayExecutor.start: an actor did not {what} within timeout_s="
                               f"{self.settings.timeout_s} s")
        return ray.get(refs)

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """``fn(*args, **kwargs)`` on every rank; the results in rank order. ``callbacks``: each is
        called in this process with every item a worker gives ``ray_logger.log``."""
        args, kwargs = list(args or []), dict(kwargs or {})
        return self.execute(lambda executable: fn(*args, **kwargs), callbacks)

    def execute(self, fn, callbacks=None):
        """``fn(executable)`` on every rank (the object start() made from executable_cls, else
        None); the results in rank order. ``callbacks`` as run's."""
        run = self._elastic.run if self._elastic is not None else self._run_reporting
        return ray_logger.run_with_callbacks(callbacks, fn, run)

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts ``fn(*args, **kwargs)`` on every rank and returns the ObjectRefs, in rank order.
        These are Ray's own: a failure shows when they are ray.get()."""
        if self._elastic is not None:
            raise NotImplementedError("RayExecutor.run_remote: elastic workers come and go during a run, so there "
                                      "is no fixed list of ObjectRefs; use run()")
        args, kwargs = list(args or []), dict(kwargs or {})
        return [w.execute.remote(lambda _: fn(*args, **kwargs)) for w in self._started()]

    def execute_single(self, fn):
        """``fn(executable)`` on rank 0 only; its result."""
        if self._elastic is not None:
            raise NotImplementedError("RayExecutor.execute_single: elastic mode has no lasting rank 0; use execute()")
        return ray.get(self._started()[0].execute.remote(fn))

    def shutdown(self):
        """Kills the actors and frees their placement group. Idempotent."""
        if self._elastic is not None:
            return self._elastic.shutdown()
        for w in self.workers:
            ray.kill(w)
        self.workers, self.hosts = [], []
        if self._group is not None:
            placement.remove(self._group)
            self._group = None

    def _started(self):
        if not self.workers:
            raise RuntimeError("RayExecutor: not started (call start(); a failed run shuts the executor down)")
        return self.workers

    def _run_reporting(self, fn):
        """Runs fn on every actor; the values in rank order, or RunError leading with the root
        cause once any rank failed (after the others had a moment to report theirs)."""
        refs = {w.execute_reporting.remote(fn): rank for rank, w in enumerate(self._started())}
        outcomes, exits, failed_at = {}, [], None
        pending = list(refs)
        while pending:
            timeout = _job_env.grace_left(failed_at)
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            if not ready:
                break
            rank = refs[ready[0]]
            try:
                outcomes[rank] = ray.get(ready[0])
            except ray.exceptions.RayError as e:  # the actor died (killed, OOM, node lost)
                exits.append((rank, f"on node {self.hosts[rank]} lost its Ray actor ({type(e).__name__}: "
                                    f"{_first_line(e)})"))
            if failed_at is None and (rank not in outcomes or outcomes[rank][0] == "error"):
                failed_at = time.monotonic()
        if failed_at is None:
            return [outcomes[r][1] for r in range(len(refs))]
        self.shutdown()
        missing = [r for r in range(len(refs)) if r not in outcomes]
        _raise_root_cause(outcomes, missing, exits[0] if exits else None, None, stopped_by="RayExecutor")


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""
