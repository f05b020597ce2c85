"""Elastic training on Ray, with horovod.ray's two APIs: ``RayExecutor(min_workers=...)``
(ElasticMode, which RayExecutor delegates to) and ``ElasticRayExecutor`` (create_settings, start,
run). Both run hora.ray.elastic_job.RayElasticJob: the job grows onto Ray nodes that appear, up to
max_workers, and shrinks when a worker's actor or node dies, while hvd.elastic.run in the
training function goes back to the last commit (docs/spark_ray.md, docs/elastic.md)."""

import dataclasses
import time
from typing import Optional

import ray

import hora.ray.placement as placement
from hora.ray import ray_logger
from hora.ray.discovery import RayHostDiscovery
from hora.ray.elastic_job import RayElasticJob

# How often start() looks at Ray's node list while it waits for enough slots.
SLOT_POLL_S = 0.5


def wait_for_slots(discovery, min_workers, timeout_s):
    """The discovery's hosts once they hold at least ``min_workers`` workers; TimeoutError after
    ``timeout_s`` saying what the cluster has. Ray has no event for a node's arrival, so this
    looks every SLOT_POLL_S."""
    deadline = time.monotonic() + timeout_s
    while True:
        hosts = discovery.find_available_hosts_and_slots()
        if sum(hosts.values()) >= min_workers:
            return hosts
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"hora.ray: the Ray cluster offers {sum(hosts.values())} worker slot(s) ({hosts or 'no node'}) after "
                f"elastic_timeout={timeout_s:g} s, and min_workers={min_workers} needs that many (a node's slots: its "
                f"CPUs // cpus_per_worker)")
        time.sleep(SLOT_POLL_S)


def _ensure_ray():
    if not ray.is_initialized():
        ray.init()


class ElasticMode:
    """What RayExecutor does with min_workers: a new elastic job (fresh actors) for every run."""

    def __init__(self, settings, min_workers, max_workers, reset_limit, cooldown_range, elastic_timeout,
                 override_discovery, cpus_per_worker, use_gpu, gpus_per_worker):
        if max_workers is not None and max_workers < min_workers:
            raise ValueError(f"RayExecutor: max_workers={max_workers} is below min_workers={min_workers}")
        if cooldown_range is not None and (len(cooldown_range) != 2 or not 0 <= cooldown_range[0] <= cooldown_range[1]):
            raise ValueError(f"RayExecutor: cooldown_range={cooldown_range!r} must be (min seconds, max seconds)")
        if not override_discovery and getattr(settings, "discovery", None) is None:
            raise ValueError("RayExecutor: override_discovery=False needs settings.discovery (an object with "
                             "find_available_hosts_and_slots())")
        self.settings = settings
        self.limits = dict(min_workers=min_workers, max_workers=max_workers, reset_limit=reset_limit,
                           cooldown_range=cooldown_range, elastic_timeout=elastic_timeout)
        self.resources = placement.worker_resources(cpus_per_worker, (gpus_per_worker or 1) if use_gpu else 0)
        self.discovery = (RayHostDiscovery(use_gpu, cpus_per_worker, gpus_per_worker) if override_discovery
                          else settings.discovery)
        self._started = None  # (executable, extra_env_vars) after start()

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None, extra_env_vars=None):
        """Waits (up to elastic_timeout) until the cluster has min_workers slots."""
        _ensure_ray()
        wait_for_slots(self.discovery, self.limits["min_workers"], self.limits["elastic_timeout"])
        self._started = ((executable_cls, executable_args, executable_kwargs), dict(extra_env_vars or {}))

    def run(self, fn):
        """``fn(executable)`` on every worker; the values of the workers that returned, in rank order."""
        if self._started is None:
            raise RuntimeError("RayExecutor: not started (call start())")
        executable, env = self._started
        job = RayElasticJob(self.discovery, timeout_s=self.settings.timeout_s, nics=self.settings.nics,
                         verbose=self.settings.verbose, resources=self.resources, extra_env_vars=env,
                         executable=executable, **self.limits)
        return job.run(fn)

    def shutdown(self):
        """Every run kills its actors when it ends; this only forgets start()."""
        self._started = None


@dataclasses.dataclass
class ElasticSettings:
    """What ElasticRayExecutor.create_settings returns (Horovod's ElasticSettings, the fields
    hora uses). ``discovery`` is set by ElasticRayExecutor unless override_discovery=False."""

    min_num_proc: int = 1
    max_num_proc: Optional[int] = None
    reset_limit: Optional[int] = None
    elastic_timeout: float = 600
    timeout_s: int = 30
    nics: Optional[set] = None
    verbose: int = 1
    cooldown_range: Optional[tuple] = None
    ssh_identity_file: Optional[str] = None
    discovery: object = None

    @property
    def num_proc(self):
        return self.min_num_proc


class ElasticRayExecutor:
    """horovod.ray's ElasticRayExecutor: ``start()``, then ``run(worker_fn)`` calls
    ``worker_fn()`` on one actor per slot of Ray's nodes (at least min_num_proc, at most
    max_num_proc) and returns the values of the workers whose function returned, in rank order."""

    @staticmethod
    def create_settings(min_num_proc=1, max_num_proc=None, reset_limit=None, elastic_timeout=600, timeout_s=30,
                        ssh_identity_file=None, nics=None, min_np=None, max_np=None, verbose=1, cooldown_range=None):
        """``min_np``/``max_np`` are Horovod's older names of min_num_proc/max_num_proc.
        ``timeout_s`` bounds the ranks' collectives (HORA_TIMEOUT_SECONDS) and each actor's start;
        ssh_identity_file is accepted and unused (no ssh on Ray)."""
        return ElasticSettings(min_num_proc=min_np if min_np is not None else min_num_proc,
                               max_num_proc=max_np if max_np is not None else max_num_proc, reset_limit=reset_limit,
                               elastic_timeout=elastic_timeout, timeout_s=timeout_s, nics=nics, verbose=verbose,
                               cooldown_range=cooldown_range, ssh_identity_file=ssh_identity_file)

    def __init__(self, settings, use_gpu=False, cpus_per_slot=1, gpus_per_slot=None, env_vars=None,
                 override_discovery=True):
        if gpus_per_slot and not use_gpu:
            raise ValueError("ElasticRayExecutor: gpus_per_slot is set but use_gpu is False")
        self.settings = settings
        self.env_vars = dict(env_vars or {})
        self._mode = ElasticMode(settings, settings.min_num_proc, settings.max_num_proc, settings.reset_limit,
                                 settings.cooldown_range, settings.elastic_timeout, override_discovery,
                                 cpus_per_slot, use_gpu, gpus_per_slot)
        settings.discovery = self._mode.discovery

    def start(self):
        """Waits (up to elastic_timeout) until the cluster has min_num_proc slots."""
        self._mode.start(extra_env_vars=self.env_vars)

    def run(self, worker_fn, callbacks=None):
        """``worker_fn()`` on every worker. ``callbacks``: each is called in this process with every
        item a worker gives ``ray_logger.log``."""
        return ray_logger.run_with_callbacks(callbacks, lambda _: worker_fn(), self._mode.run)

    def shutdown(self):
        self._mode.shutdown()
