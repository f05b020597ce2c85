"""The driver of spark_ray_multihost_test.sh, run on namespace host 1 while the cluster's daemons
run on hosts 1-3: `runners_multihost.py spark spark://h1:7077 h1` or `... ray h1:6379 h1`.

Two ranks land on hosts 2 and 3; the checks: each rank's host and topology as hora derived it,
an allreduce against numpy over the hosts' link, the training reference, and a rank killed
mid-job failing the run within seconds with an error naming the rank and its host. On Ray also an
elastic job on the two hosts' nodes that loses rank 1's actor and goes on from its last commit."""

import os
import sys
import tempfile
import time

import numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import elastic_jobs  # noqa: E402
import runner_jobs  # noqa: E402
from hora.runner import RunError  # noqa: E402

FAILURE_DEADLINE_S = 10.0


def placement():
    import hora.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.arange(1000, dtype=torch.float32) * (hvd.rank() + 1), op=hvd.Sum).numpy()
    return (hvd.rank(), os.environ["HORA_HOSTNAME"], hvd.local_rank(), hvd.cross_rank(), hvd.cross_size(),
            os.environ["HORA_RENDEZVOUS_ADDR"], total)


def check_placement(results, hosts):
    want = numpy.arange(1000, dtype=numpy.float32) * 3
    assert sorted(r[1] for r in results) == sorted(hosts), results
    for rank, (r, host, local_rank, cross_rank, cross_size, store, total) in enumerate(results):
        assert (r, local_rank, cross_rank, cross_size) == (rank, 0, rank, 2), results
        assert store == results[0][1]  # rank 0 serves the store on its own host
        numpy.testing.assert_array_equal(total, want)
    print(f"ok: 2 ranks on hosts {[r[1] for r in results]}, rank 0 serving the store; allreduce equals numpy")


def check_kill(run, what):
    """run(fn, pid_dir) runs runner_jobs.train_until_killed; its rank 1 is killed once it trains."""
    e, elapsed = runner_jobs.run_and_kill(run)
    assert isinstance(e, RunError) and e.rank == 1 and elapsed < FAILURE_DEADLINE_S, (elapsed, str(e))
    print(f"ok: {what}: rank 1 killed -> RunError in {elapsed:.2f} s: {str(e).splitlines()[0]}")
    return str(e)


def _namespaces():
    """{host address: its network namespace}, from HOST_NAMESPACES ("addr=netns ...")."""
    return dict(pair.split("=") for pair in os.environ["HOST_NAMESPACES"].split())


def host_processes(host):
    """Every process of namespace host `host` (its daemons, executors or nodes, and ranks): killing
    them all is that host's death, as the other hosts see it."""
    import subprocess

    out = subprocess.run(["ip", "netns", "pids", _namespaces()[host]], capture_output=True, text=True, check=True)
    return [int(p) for p in out.stdout.split()]


def host_of(pid):
    """The namespace host in whose network the process lives."""
    mine = os.stat(f"/proc/{pid}/ns/net").st_ino
    for host, ns in _namespaces().items():
        if os.stat(f"/run/netns/{ns}").st_ino == mine:
            return host
    raise AssertionError(f"process {pid} is on no namespace host")


def check_host_death(run, what):
    """Rank 1's whole host dies (every process in its namespace) while the ranks train."""
    dead = []

    def everything_on_its_host(pid, ppid):
        dead.append(host_of(pid))
        return host_processes(dead[0])

    e, elapsed = runner_jobs.run_and_kill(run, everything_on_its_host)
    assert isinstance(e, RunError) and e.rank == 1 and elapsed < FAILURE_DEADLINE_S, (elapsed, str(e))
    assert str(e).startswith("rank 1 on "), str(e)
    assert dead[0] in str(e).splitlines()[0], (dead, str(e))
    print(f"ok: {what}: every process of rank 1's host {dead[0]} killed -> RunError in {elapsed:.2f} s: "
          f"{str(e).splitlines()[0]}")


def set_link(host, state):
    """Brings namespace host `host`'s link (the bridge's end of its veth, in the test script's
    network namespace, MACHINE_NETNS) up or down; HOST_LINKS: "addr=veth ..."."""
    import subprocess

    veth = dict(pair.split("=") for pair in os.environ["HOST_LINKS"].split())[host]
    subprocess.run(["nsenter", f"--net={os.environ['MACHINE_NETNS']}", "ip", "link", "set", veth, state], check=True,
                   timeout=30)


def check_link_cut(run, what, timeout_s):
    """Rank 1's host is cut off the network while the ranks train: its connections neither close
    nor answer, so the ranks learn it from hora's deadline (HORA_TIMEOUT_SECONDS=timeout_s)."""
    cut = []

    def cut_its_link(pid, ppid):
        cut.append(host_of(pid))
        set_link(cut[0], "down")

    try:
        e, elapsed = runner_jobs.run_and_strike(run, cut_its_link)
    finally:
        if cut:
            set_link(cut[0], "up")
    first = str(e).splitlines()[0]
    assert isinstance(e, RunError) and "rank 1" in first, str(e)
    assert elapsed < timeout_s + FAILURE_DEADLINE_S, (elapsed, str(e))
    print(f"ok: {what}: rank 1's host {cut[0]} cut off -> RunError in {elapsed:.2f} s "
          f"(HORA_TIMEOUT_SECONDS={timeout_s}): {first}")


def check_elastic_kill(settings, hosts, progress_dir):
    """An elastic RayExecutor on the two hosts' nodes (horarun on host 1 starts the workers there
    as actors, the store on host 1): rank 1's actor killed, the job goes on at one rank from
    its last commit and ends equal to the numpy replay of its log."""
    from hora.ray import RayExecutor

    executor = RayExecutor(settings, min_workers=1, max_workers=2, cpus_per_worker=1)
    executor.start()
    job = elastic_jobs.RunInThread(executor, elastic_jobs.train, (progress_dir, elastic_jobs.shrank_from(2)))
    killed_after = elastic_jobs.wait_progress(job, progress_dir, 2, 2 * elastic_jobs.COMMIT_EVERY,
                                              between_commits=True)
    with open(os.path.join(progress_dir, "pid.1")) as f:
        pid = int(f.read())
    killed_host = host_of(pid)
    os.kill(pid, 9)
    killed_at = time.monotonic()
    elastic_jobs.wait_progress(job, progress_dir, 1, 0)
    elapsed = time.monotonic() - killed_at
    [(weights, log, ran, _)] = job.result()
    elastic_jobs.check_training(weights, log)
    elastic_jobs.check_redone(ran, killed_after)
    assert killed_host in hosts, (killed_host, hosts)
    print(f"ok: elastic RayExecutor on {sorted(hosts)}: rank 1's actor on {killed_host} killed -> a step at 1 rank "
          f"after {elapsed:.2f} s; {len(log)} steps, weights equal the replay of the commits")


def spark_main(master, driver_host, hosts):
    from pyspark.sql import SparkSession

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(runner_jobs)
    import hora.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable  # what the executors run (spark.pyspark.python is spark-submit's)
    start = time.monotonic()
    spark = (SparkSession.builder.master(master).appName("hora-multihost")
             .config("spark.driver.host", driver_host).config("spark.driver.bindAddress", driver_host)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.executor.memory", "512m").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"ok: SparkSession on {master} in {time.monotonic() - start:.1f} s")
    try:
        start = time.monotonic()
        check_placement(hora.spark.run(placement, num_proc=2, start_timeout=120), hosts)
        print(f"   (first run, executors starting: {time.monotonic() - start:.1f} s)")
        runner_jobs.check(hora.spark.run(runner_jobs.train, num_proc=2))
        print("ok: training through hora.spark.run across hosts equals the one-process reference")
        message = check_kill(lambda fn, pid_dir: hora.spark.run(fn, args=(pid_dir,), num_proc=2,
                                                                 stderr=open(os.devnull, "w")), "hora.spark")
        assert any(f"rank 1 on host {h} was killed by SIGKILL" in message for h in hosts), message
        check_link_cut(lambda fn, pid_dir: hora.spark.run(fn, args=(pid_dir,), num_proc=2, stderr=open(os.devnull, "w"),
                                                          env={"HORA_TIMEOUT_SECONDS": 5}), "hora.spark", 5)
        check_host_death(lambda fn, pid_dir: hora.spark.run(fn, args=(pid_dir,), num_proc=2,
                                                            stderr=open(os.devnull, "w")), "hora.spark")
    finally:
        spark.stop()


def ray_main(address, driver_host, hosts):
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(runner_jobs)
    ray.cloudpickle.register_pickle_by_value(elastic_jobs)
    from hora.ray import RayExecutor

    ray.init(address=address, _node_ip_address=driver_host, configure_logging=False)
    try:
        settings = RayExecutor.create_settings(timeout_s=30, placement_group_timeout_s=60)
        start = time.monotonic()
        executor = RayExecutor(settings, num_hosts=2, num_workers_per_host=1)
        executor.start()
        print(f"ok: RayExecutor(num_hosts=2) started in {time.monotonic() - start:.1f} s on {executor.hosts}")
        check_placement(executor.run(placement), hosts)
        runner_jobs.check(executor.run(runner_jobs.train))
        print("ok: training through RayExecutor across hosts equals the one-process reference")
        message = check_kill(lambda fn, pid_dir: executor.run(fn, args=[pid_dir]), "hora.ray")
        assert any(f"rank 1 on node {h} lost its Ray actor" in message for h in hosts), message
        # The failed run shut the executor down, so the nodes' CPUs are free for an elastic job
        # (before the host death below, which leaves one node).
        with tempfile.TemporaryDirectory(prefix="hora-elastic-") as progress_dir:
            check_elastic_kill(settings, hosts, progress_dir)
        executor.start()
        check_host_death(lambda fn, pid_dir: executor.run(fn, args=[pid_dir]), "hora.ray")
        executor.shutdown()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    mode, address, driver_host, *worker_hosts = sys.argv[1:]
    {"spark": spark_main, "ray": ray_main}[mode](address, driver_host, worker_hosts)
