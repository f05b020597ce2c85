"""Elastic hora jobs on a real Ray cluster (hora.ray.elastic): a head without CPUs (this
process, ray.init) and worker nodes of one CPU each on 127.0.0.2, 127.0.0.3, ... (`ray start`
processes this module starts and kills by process group), so that each worker is a host of its
own as on a real cluster. A node is killed as a machine dies: every process of it at once (its
`ray start`, raylet, agents and workers share one process group). The job and its checks
against a numpy reference: elastic_jobs.py."""

import os
import signal
import subprocess
import sys
import time

import numpy
import pytest

import elastic_jobs as jobs
import runner_jobs
from elastic_jobs import COMMIT_EVERY
from hora.ray import ElasticRayExecutor, RayExecutor
from hora.ray.discovery import RayHostDiscovery
from hora.runner import RunError

NODE_DEADLINE_S = 60
# The contract: a dead rank fails a fixed-size run within this many seconds.
FAILURE_DEADLINE_S = 10.0
# Ray's head asks each node's raylet for its health every period; a node that fails the threshold
# of checks in a row is dead. Ray's defaults (3 s x 5) take ~15 s to notice a killed node, which
# later tests would wait for; a dead raylet's checks fail at once (connection refused), so a
# shorter period only makes that quicker. The timeout of one check stays Ray's (10 s), so a
# raylet that is slow on a loaded machine is not declared dead.
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}


class _Cluster:
    """The head (ray.init in this process) and worker nodes by IP."""

    def __init__(self, tmp):
        import ray

        self.ray = ray
        # address="local": a new cluster, whatever another cluster on this machine left behind.
        ray.init(address="local", num_cpus=0, include_dashboard=False, configure_logging=False,
                 _temp_dir=str(tmp), _system_config=HEALTH_CHECKS)
        self.temp_dir = str(tmp)
        self.address = ray.get_runtime_context().gcs_address
        self.nodes = {}  # ip -> the `ray start --block` process (the leader of its process group)
        self.killed = set()  # ips of killed nodes that Ray may still list as alive

    def alive(self):
        return {n["NodeManagerAddress"] for n in self.ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}

    def node_of(self, pid):
        """The ip of the node whose process group holds process ``pid`` (an actor's)."""
        group = os.getpgid(pid)
        return next(ip for ip, proc in self.nodes.items() if proc.pid == group)

    def kill_node(self, ip):
        """SIGKILL to every process of the node at once, as when its machine dies."""
        proc = self.nodes.pop(ip)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.killed.add(ip)

    def wait_killed_gone(self):
        """Until Ray has marked the killed nodes dead, so that neither discovery nor a placement
        group counts them (about HEALTH_CHECKS' period x threshold after the kill)."""
        deadline = time.monotonic() + NODE_DEADLINE_S
        while self.killed & self.alive():
            assert time.monotonic() < deadline, f"Ray still lists killed nodes {self.killed & self.alive()} as alive"
            time.sleep(0.2)
        self.killed.clear()

    def add(self, ip):
        ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
        # These nodes share one network namespace, where each raylet hands out its workers' ports
        # from its own range as if it had the host to itself: overlapping ranges let two workers
        # take the same port, and the second dies at start ("Address already in use"). Each node
        # gets ports of its own, above the head's (Ray's default, 10002-19999) and below the
        # ephemeral range.
        first = 20000 + 50 * int(ip.rsplit(".", 1)[1])
        self.nodes[ip] = subprocess.Popen(
            [ray_cli, "start", "--address", self.address, "--node-ip-address", ip, "--num-cpus", "1", "--block",
             "--temp-dir", self.temp_dir, "--disable-usage-stats", "--min-worker-port", str(first),
             "--max-worker-port", str(first + 49)],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_for(self, ips):
        deadline = time.monotonic() + NODE_DEADLINE_S
        while not set(ips) <= self.alive():
            assert time.monotonic() < deadline, f"Ray nodes {ips} not up after {NODE_DEADLINE_S} s: {self.alive()}"
            time.sleep(0.2)

    def ensure(self, *ips):
        self.wait_killed_gone()
        for ip in ips:
            if ip not in self.nodes:
                self.add(ip)
        self.wait_for(ips)

    def new_ip(self):
        return next(f"127.0.0.{i}" for i in range(2, 250) if f"127.0.0.{i}" not in self.nodes)

    def close(self):
        for proc in self.nodes.values():
            os.killpg(proc.pid, signal.SIGKILL)  # the node's raylet and workers are in its group
            proc.wait(timeout=30)
        self.ray.shutdown()


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(request.module)  # the actors cannot import these files
    ray.cloudpickle.register_pickle_by_value(jobs)
    ray.cloudpickle.register_pickle_by_value(runner_jobs)
    c = _Cluster(tmp_path_factory.mktemp("ray"))
    c.ensure("127.0.0.2")
    yield c
    c.close()


def _elastic_executor(**kwargs):
    settings = RayExecutor.create_settings(timeout_s=30)
    return RayExecutor(settings, cpus_per_worker=1, **kwargs)


def test_discovery_is_the_alive_nodes_with_cpus(cluster):
    cluster.ensure("127.0.0.2")
    hosts = RayHostDiscovery(cpus_per_worker=1).find_available_hosts_and_slots()
    assert hosts == {ip: 1 for ip in cluster.alive()}  # the head has no CPU: no host
    assert RayHostDiscovery(cpus_per_worker=2).find_available_hosts_and_slots() == {}


def _log_once_per_rank():
    import torch
    import hora.torch as hvd
    from hora.ray import ray_logger

    hvd.init()

    @hvd.elastic.run
    def train(state):
        ray_logger.log({"rank": hvd.rank(), "size": hvd.size()})
        hvd.allreduce(torch.zeros(1), name="logged")  # every rank logged before any returns
        return hvd.rank()

    return train(hvd.elastic.ObjectState(step=0))


def test_an_elastic_runs_callbacks_get_what_its_workers_log(cluster):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    settings = ElasticRayExecutor.create_settings(min_num_proc=size, max_num_proc=size, elastic_timeout=30)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    got = []
    try:
        assert sorted(executor.run(_log_once_per_rank, callbacks=[got.append])) == list(range(size))
    finally:
        executor.shutdown()
    assert sorted(item["rank"] for item in got) == list(range(size)), got
    assert {item["size"] for item in got} == {size}, got


def test_a_node_that_joins_grows_the_job(cluster, tmp_path):
    before = sorted(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=len(before) + 1)
    executor.start()
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), jobs.grew_to(len(before) + 1)))
    jobs.wait_progress(job, str(tmp_path), len(before), 2 * COMMIT_EVERY)
    new = cluster.new_ip()
    added_at = time.monotonic()
    cluster.add(new)
    jobs.wait_progress(job, str(tmp_path), len(before) + 1, 0)
    print(f"\nhora.ray elastic: node {new} added -> a step at {len(before) + 1} rank(s) after "
          f"{time.monotonic() - added_at:.2f} s", file=sys.stderr)
    results = job.result()
    assert len(results) == len(before) + 1  # every worker of the last generation returned
    for weights, log, _, _ in results:
        jobs.check_training(weights, log)
        numpy.testing.assert_array_equal(weights, results[0][0])
        sizes = [n for _, n in log]
        assert sizes[0] <= len(before) and sizes[-1] == len(before) + 1
    cluster.wait_for([new])


def test_a_killed_worker_shrinks_the_job_which_resumes_from_the_last_commit(cluster, tmp_path):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=size)
    executor.start()
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), jobs.shrank_from(size)))
    killed_after = jobs.wait_progress(job, str(tmp_path), size, 2 * COMMIT_EVERY, between_commits=True)
    with open(tmp_path / f"pid.{size - 1}") as f:
        os.kill(int(f.read()), signal.SIGKILL)  # the actor's process, as the OOM killer would
    killed_at = time.monotonic()
    jobs.wait_progress(job, str(tmp_path), size - 1, 0)
    print(f"\nhora.ray elastic: actor killed -> a step at {size - 1} rank(s) after "
          f"{time.monotonic() - killed_at:.2f} s", file=sys.stderr)
    results = job.result()
    assert len(results) == size - 1
    weights, log, ran, _ = results[0]
    jobs.check_training(weights, log)
    sizes = [n for _, n in log]
    assert size in sizes and sizes[-1] == size - 1
    # Rank 0 redid only the steps since the last commit before the failure.
    jobs.check_redone(ran, killed_after)


def test_fewer_than_min_workers_ends_the_job_naming_the_lost_worker(cluster, tmp_path):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    settings = ElasticRayExecutor.create_settings(min_num_proc=size, max_num_proc=size, elastic_timeout=10,
                                                  timeout_s=30)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    progress = str(tmp_path)
    job = jobs.RunInThread(_NoArgs(executor), jobs.train, (progress, lambda log: False))
    jobs.wait_progress(job, progress, size, COMMIT_EVERY)
    with open(tmp_path / f"pid.{size - 1}") as f:
        os.kill(int(f.read()), signal.SIGKILL)
    killed_at = time.monotonic()
    with pytest.raises(RunError) as info:
        job.result()
    # The elastic timeout after the kill, plus the detection and horarun's stop. (It also bounds
    # how long the first workers may take to form the job, so 3 s failed on a loaded machine.)
    elapsed = time.monotonic() - killed_at
    print(f"\nhora.ray elastic: actor killed below min_workers -> RunError after {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < 10 + 15
    message = str(info.value)
    assert f"fewer than --min-np {size}" in message
    assert "lost its Ray actor" in message and "on node 127.0.0." in message


class _NoArgs:
    """ElasticRayExecutor.run takes a function of no arguments."""

    def __init__(self, executor):
        self.executor = executor

    def run(self, fn, args):
        return self.executor.run(lambda: fn(*args))


def test_more_resets_than_reset_limit_end_the_job(cluster, tmp_path):
    """reset_limit=1: losing a worker is the one reset allowed (the job goes on, smaller); when its
    host's cooldown ends and a new worker joins, that second reset ends the job. The cooldown
    leaves the smaller job time to train before it (under load, 1 s was not always enough)."""
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=size, reset_limit=1, cooldown_range=(4, 4))
    executor.start()
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), lambda log: False))
    jobs.wait_progress(job, str(tmp_path), size, COMMIT_EVERY)
    with open(tmp_path / f"pid.{size - 1}") as f:
        os.kill(int(f.read()), signal.SIGKILL)
    jobs.wait_progress(job, str(tmp_path), size - 1, 0)  # the first reset was allowed
    with pytest.raises(RunError) as info:
        job.result()
    message = str(info.value)
    assert "the job was reset 1 time(s) and --reset-limit is 1" in message, message
    assert "lost its Ray actor" in message, message  # what caused the first reset


def test_a_killed_node_shrinks_the_job_which_resumes_from_the_last_commit(cluster, tmp_path):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=size)
    executor.start()
    job = jobs.RunInThread(executor, jobs.train, (str(tmp_path), jobs.shrank_from(size)))
    killed_after = jobs.wait_progress(job, str(tmp_path), size, 2 * COMMIT_EVERY, between_commits=True)
    # Each rank's node, taken now: when the run returns, its actors are being killed, and a
    # process that is gone has no process group to look up.
    pids = []
    for rank in range(size):
        with open(tmp_path / f"pid.{rank}") as f:
            pids.append(int(f.read()))
    node_by_pid = {pid: cluster.node_of(pid) for pid in pids}
    node = node_by_pid[pids[-1]]  # the last rank's
    cluster.kill_node(node)
    killed_at = time.monotonic()
    jobs.wait_progress(job, str(tmp_path), size - 1, 0)
    print(f"\nhora.ray elastic: node {node} killed -> a step at {size - 1} rank(s) after "
          f"{time.monotonic() - killed_at:.2f} s", file=sys.stderr)
    results = job.result()
    assert len(results) == size - 1
    for weights, log, ran, pid in results:
        jobs.check_training(weights, log)
        numpy.testing.assert_array_equal(weights, results[0][0])
        sizes = [n for _, n in log]
        assert size in sizes and sizes[-1] == size - 1
        assert node_by_pid.get(pid, node) != node, (pid, node_by_pid)  # a survivor, re-formed in place
    jobs.check_redone(results[0][2], killed_after)


def test_a_killed_node_fails_a_fixed_size_run_within_seconds_naming_rank_and_node(cluster):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    settings = RayExecutor.create_settings(timeout_s=30, placement_group_timeout_s=NODE_DEADLINE_S)
    executor = RayExecutor(settings, num_hosts=2, num_workers_per_host=1)
    executor.start()
    killed = []

    def kill_its_node(pid, ppid):
        killed.append(cluster.node_of(pid))
        cluster.kill_node(killed[0])

    try:
        e, elapsed = runner_jobs.run_and_strike(lambda fn, pid_dir: executor.run(fn, args=[pid_dir]), kill_its_node)
    finally:
        executor.shutdown()
    print(f"\nhora.ray: node {killed[0]} of rank 1 killed -> RunError in {elapsed:.2f} s", file=sys.stderr)
    assert isinstance(e, RunError), e
    assert elapsed < FAILURE_DEADLINE_S
    assert e.rank == 1
    assert str(e).startswith(f"rank 1 on node {killed[0]} lost its Ray actor"), str(e)
