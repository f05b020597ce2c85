"""One run of an elastic hora job on Ray: horarun's elastic driver decides, Ray places
(docs/spark_ray.md, "Elastic training on Ray").

RayElasticJob is hora._elastic_job.ElasticJob (horarun in elastic mode, a discovery file kept
from Ray's node list, a hora._worker_proxy per worker) whose workers are Ray actors: "start
worker w on host h" becomes an actor on h, and the actor's end the proxy's exit code. A worker
is one actor: its process is the rank across generations (hvd.elastic.run re-forms in place),
and it is killed when its proxy goes.
"""

import logging
import time

import ray

from hora._elastic_job import ElasticJob, WorkerError, elastic_call, first_line
from hora.ray.worker import BaseHorovodWorker

log = logging.getLogger("hora.ray")

# How long run() waits, once the job ended, for Ray to report its killed actors dead: their
# resources are free for the next run when it returns.
ACTORS_GONE_S = 10.0


class RayElasticJob(ElasticJob):
    """ElasticJob's limits, plus: ``timeout_s`` also bounds each actor's start; ``resources``
    are one actor's ({"CPU": n, "GPU": m}); ``executable`` is (cls, args, kwargs), made in every
    actor; ``extra_env_vars`` reach every actor's environment."""

    who = "hora.ray"
    where = "node"

    def __init__(self, discovery, *, min_workers, max_workers=None, reset_limit=None, cooldown_range=None,
                 elastic_timeout=600, timeout_s=30, nics=None, verbose=1, resources=None, extra_env_vars=None,
                 executable=None):
        super().__init__(discovery, min_workers=min_workers, max_workers=max_workers, reset_limit=reset_limit,
                         cooldown_range=cooldown_range, elastic_timeout=elastic_timeout, timeout_s=timeout_s,
                         nics=nics, verbose=verbose, extra_env=extra_env_vars)
        self.resources = resources or {"CPU": 1}
        self.executable = executable or (None, None, None)  # (cls, args, kwargs) made in every actor
        self._fn = None
        self._actor_cls = ray.remote(BaseHorovodWorker)

    def run(self, worker_fn):
        """worker_fn(executable) on every worker of the job as it grows and shrinks, until one
        returns and horarun ends the job; the values of the workers that returned, in rank order."""
        self._fn = elastic_call(worker_fn)
        return super().run()

    def _launch(self, worker, env):
        ref = self._place(worker, env)
        if worker.stopped:  # horarun stopped the proxy while the actor started
            ray.kill(worker.handle)
        return self._outcome(worker, ref)

    def _stop_worker(self, worker):
        if worker.handle is not None:
            ray.kill(worker.handle)

    def _end(self):
        self._kill_actors()

    def _place(self, worker, env):
        """Starts the worker's actor on its host with its environment; its function's ObjectRef."""
        size = env.get("HORA_SIZE", "1")
        options = {"num_cpus": self.resources.get("CPU", 1), "num_gpus": self.resources.get("GPU", 0),
                   # Any node with the host's address: Ray's built-in resource of every node.
                   "resources": {f"node:{worker.host}": 0.001}, "max_restarts": 0}
        actor = self._actor_cls.options(**options).remote(
            world_rank=worker.started_rank, world_size=int(size))
        worker.handle = actor
        cls, args, kwargs = self.executable
        ready = [actor.update_env_vars.remote(env),
                 actor.start_executable.remote(cls, args, kwargs)]
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=self.timeout_s)
        if len(done) < len(ready):
            ray.kill(actor)
            raise WorkerError(f"hora.ray: {worker.name()}: Ray did not start its actor within timeout_s="
                              f"{self.timeout_s} s (is the node alive, with {self.resources} free?)")
        try:
            ray.get(ready)
        except ray.exceptions.RayError as e:
            ray.kill(actor)
            raise WorkerError(f"hora.ray: {worker.name()}: its actor failed to start ({type(e).__name__}: "
                              f"{first_line(e)})")
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
            text = f"hora.ray: {worker.name()} lost its Ray actor ({type(e).__name__}: {first_line(e)})"
            self._fail(worker, text)
            return 1, text
        if outcome[0] == "ok":
            kind, rank, value = outcome[1]
            if kind == "done":
                self._returned(worker, rank, value)
            return 0, ""
        _, type_name, message, traceback, _, _, _ = outcome
        text = f"hora.ray: {worker.name()} raised {type_name}: {message}"
        self._fail(worker, text, traceback)
        return 1, text

    def _kill_actors(self):
        """Kills every actor of the run and waits (up to ACTORS_GONE_S) until Ray has seen each
        one's function end, so that their CPUs are free when run() returns."""
        workers = self.workers()
        for w in workers:
            if w.handle is not None:
                if not w.ended.is_set():
                    w.stopped = True  # the job is over: not a failure of its own
                ray.kill(w.handle)
        deadline = time.monotonic() + ACTORS_GONE_S
        for w in workers:
            if not w.ended.wait(timeout=max(0.0, deadline - time.monotonic())):
                log.warning("hora.ray: %s: Ray has not reported its killed actor dead after %g s", w.name(),
                            ACTORS_GONE_S)
                break
