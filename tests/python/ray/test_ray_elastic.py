"""Elastic hora jobs on a real Ray cluster (hora.ray.elastic): a head without CPUs (this
process, ray.init) and worker nodes of one CPU each on 127.0.0.2, 127.0.0.3, ... (`ray start`
processes this module starts and kills by process group), so that each worker is a host of its
own as on a real cluster.

The training is hora.torch's elastic loop on a linear model whose gradient at step s on rank r
has a closed form; every step appends (step, size) to the committed state, so the final weights
must equal a numpy replay of that log, and the log must hold every step exactly once: a failure
may only redo the steps since the last commit."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy
import pytest

from hora.ray import ElasticRayExecutor, RayExecutor
from hora.ray.discovery import RayHostDiscovery
from hora.runner import RunError

COMMIT_EVERY = 5
LR = 0.1
MAX_STEPS = 3000     # a bound so that a training that never sees its event ends (and fails)
RUN_DEADLINE_S = 240  # each run, from run() to its result or error (a bound: a machine under load is slow)
NODE_DEADLINE_S = 60


class _Cluster:
    """The head (ray.init in this process) and worker nodes by IP."""

    def __init__(self, tmp):
        import ray

        self.ray = ray
        # address="local": a new cluster, whatever another cluster on this machine left behind.
        ray.init(address="local", num_cpus=0, include_dashboard=False, configure_logging=False,
                 _temp_dir=str(tmp))
        self.temp_dir = str(tmp)
        self.address = ray.get_runtime_context().gcs_address
        self.nodes = {}  # ip -> the `ray start --block` process (the leader of its process group)

    def alive(self):
        return {n["NodeManagerAddress"] for n in self.ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}

    def add(self, ip):
        ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
        self.nodes[ip] = subprocess.Popen(
            [ray_cli, "start", "--address", self.address, "--node-ip-address", ip, "--num-cpus", "1", "--block",
             "--temp-dir", self.temp_dir, "--disable-usage-stats"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_for(self, ips):
        deadline = time.monotonic() + NODE_DEADLINE_S
        while not set(ips) <= self.alive():
            assert time.monotonic() < deadline, f"Ray nodes {ips} not up after {NODE_DEADLINE_S} s: {self.alive()}"
            time.sleep(0.2)

    def ensure(self, *ips):
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

    ray.cloudpickle.register_pickle_by_value(request.module)  # the actors cannot import this file
    c = _Cluster(tmp_path_factory.mktemp("ray"))
    c.ensure("127.0.0.2")
    yield c
    c.close()


def gradient(step, rank):
    return numpy.array([(step + 1) * (rank + 1) + i for i in range(4)], dtype=numpy.float64) / 100.0


def reference_weights(log):
    """The weights after the logged steps, by numpy: plain SGD on the average of the ranks'
    gradients at each step's size."""
    w = numpy.zeros(4)
    for step, size in log:
        w -= LR * numpy.mean([gradient(step, r) for r in range(size)], axis=0)
    return w


def train(progress_dir, done_when):
    """hora.torch's elastic loop; ``done_when(log)`` (the committed (step, size) log) ends it on
    every rank at the same step. Returns the weights, the log, the steps this process ran (with
    the redone ones) and its pid."""
    import torch

    import hora.torch as hvd

    hvd.init()
    model = torch.nn.Linear(4, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0, log=[])
    ran = []

    @hvd.elastic.run
    def loop(state):
        # Written at every (re)start: where the test finds this worker's process.
        with open(os.path.join(progress_dir, f"pid.{hvd.rank()}"), "w") as f:
            f.write(f"{os.getpid()}\n")
        while not done_when(state.log) and state.step < MAX_STEPS:
            optimizer.zero_grad()
            g = torch.from_numpy(gradient(state.step, hvd.rank())).reshape(1, 4)
            (model.weight * g).sum().backward()
            optimizer.step()
            ran.append(state.step)
            state.log.append((state.step, hvd.size()))
            state.step += 1
            if hvd.rank() == 0:
                with open(os.path.join(progress_dir, "progress.tmp"), "w") as f:
                    f.write(f"{state.step} {hvd.size()}\n")
                os.replace(os.path.join(progress_dir, "progress.tmp"), os.path.join(progress_dir, "progress"))
            time.sleep(0.05)
            if state.step % COMMIT_EVERY == 0:
                state.commit()

    loop(state)
    return model.weight.detach().numpy().reshape(4).copy(), list(state.log), ran, os.getpid()


def _progress(progress_dir):
    try:
        with open(os.path.join(progress_dir, "progress")) as f:
            step, size = f.read().split()
        return int(step), int(size)
    except (OSError, ValueError):
        return 0, 0


def _wait_progress(progress_dir, size, steps, deadline, between_commits=False):
    """The step count once training ran ``steps`` steps at ``size``; with ``between_commits``,
    at a step 1 or 2 past a commit, so that a kill then comes at least 2 steps before the next
    commit and after at least 1 step that the restore must redo."""
    while True:
        step, now = _progress(progress_dir)
        if now == size and step >= steps and (not between_commits or step % COMMIT_EVERY in (1, 2)):
            return step
        assert time.monotonic() < deadline, f"training never reached {steps} steps at size {size} (at {step}, {now})"
        time.sleep(0.05)


def _run_in_thread(executor, fn, args):
    """executor.run in a thread, so that the test can act on the cluster meanwhile; returns a
    function that waits (within RUN_DEADLINE_S of now) and gives the result or raises."""
    box = {}

    def target():
        try:
            box["result"] = executor.run(fn, args=args)
        except BaseException as e:  # noqa: B036 - handed to the test's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + RUN_DEADLINE_S

    def result():
        thread.join(timeout=max(0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"the elastic run did not end within {RUN_DEADLINE_S} s"
        if "error" in box:
            raise box["error"]
        return box["result"]

    return result, deadline


def _elastic_executor(**kwargs):
    settings = RayExecutor.create_settings(timeout_s=30)
    return RayExecutor(settings, cpus_per_worker=1, **kwargs)


def _check_training(weights, log):
    steps = [s for s, _ in log]
    assert steps == list(range(len(log))), "a committed step was lost or repeated"
    numpy.testing.assert_allclose(weights, reference_weights(log), rtol=1e-12)


def _grew_to(size):
    return lambda log: sum(1 for _, n in log if n == size) >= 2 * COMMIT_EVERY


def _shrank_from(size):
    return lambda log: any(n == size for _, n in log) and len(log) >= 10 and all(n < size for _, n in log[-10:])


def test_discovery_is_the_alive_nodes_with_cpus(cluster):
    cluster.ensure("127.0.0.2")
    hosts = RayHostDiscovery(cpus_per_worker=1).find_available_hosts_and_slots()
    assert hosts == {ip: 1 for ip in cluster.alive()}  # the head has no CPU: no host
    assert RayHostDiscovery(cpus_per_worker=2).find_available_hosts_and_slots() == {}


def test_a_node_that_joins_grows_the_job(cluster, tmp_path):
    before = sorted(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=len(before) + 1)
    executor.start()
    result, deadline = _run_in_thread(executor, train, (str(tmp_path), _grew_to(len(before) + 1)))
    _wait_progress(str(tmp_path), len(before), 2 * COMMIT_EVERY, deadline)
    new = cluster.new_ip()
    cluster.add(new)
    results = result()
    assert len(results) == len(before) + 1  # every worker of the last generation returned
    for weights, log, _, _ in results:
        _check_training(weights, log)
        numpy.testing.assert_array_equal(weights, results[0][0])
        sizes = [n for _, n in log]
        assert sizes[0] <= len(before) and sizes[-1] == len(before) + 1
    cluster.wait_for([new])


def test_a_killed_worker_shrinks_the_job_which_resumes_from_the_last_commit(cluster, tmp_path):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    executor = _elastic_executor(min_workers=1, max_workers=size)
    executor.start()
    result, deadline = _run_in_thread(executor, train, (str(tmp_path), _shrank_from(size)))
    killed_after = _wait_progress(str(tmp_path), size, 2 * COMMIT_EVERY, deadline, between_commits=True)
    with open(tmp_path / f"pid.{size - 1}") as f:
        os.kill(int(f.read()), signal.SIGKILL)  # the actor's process, as the OOM killer would
    killed_at = time.monotonic()
    _wait_progress(str(tmp_path), size - 1, 0, deadline)
    print(f"\nhora.ray elastic: actor killed -> a step at {size - 1} rank(s) after "
          f"{time.monotonic() - killed_at:.2f} s", file=sys.stderr)
    results = result()
    assert len(results) == size - 1
    weights, log, ran, _ = results[0]
    _check_training(weights, log)
    sizes = [n for _, n in log]
    assert size in sizes and sizes[-1] == size - 1
    # Rank 0 redid only the steps since the last commit before the failure.
    redone = sorted(set(s for s in ran if ran.count(s) > 1))
    last_commit = killed_after // COMMIT_EVERY * COMMIT_EVERY
    assert redone and redone[0] == last_commit and redone == list(range(last_commit, redone[-1] + 1))
    assert redone[-1] <= killed_after + 1


def test_fewer_than_min_workers_ends_the_job_naming_the_lost_worker(cluster, tmp_path):
    cluster.ensure("127.0.0.2", "127.0.0.3")
    size = len(cluster.alive())
    settings = ElasticRayExecutor.create_settings(min_num_proc=size, max_num_proc=size, elastic_timeout=3,
                                                  timeout_s=30)
    executor = ElasticRayExecutor(settings, cpus_per_slot=1)
    executor.start()
    progress = str(tmp_path)
    result, deadline = _run_in_thread(_NoArgs(executor), train, (progress, lambda log: False))
    _wait_progress(progress, size, COMMIT_EVERY, deadline)
    with open(tmp_path / f"pid.{size - 1}") as f:
        os.kill(int(f.read()), signal.SIGKILL)
    killed_at = time.monotonic()
    with pytest.raises(RunError) as info:
        result()
    # The elastic timeout (3 s) after the kill, plus the detection and horarun's stop.
    elapsed = time.monotonic() - killed_at
    print(f"\nhora.ray elastic: actor killed below min_workers -> RunError after {elapsed:.2f} s", file=sys.stderr)
    assert elapsed < 3 + 15
    message = str(info.value)
    assert f"fewer than --min-np {size}" in message
    assert "lost its Ray actor" in message and "on node 127.0.0." in message


class _NoArgs:
    """ElasticRayExecutor.run takes a function of no arguments."""

    def __init__(self, executor):
        self.executor = executor

    def run(self, fn, args):
        return self.executor.run(lambda: fn(*args))
