#!/usr/bin/env python3
"""The same training through horarun (hora.run), hora.spark.run and RayExecutor on this host:
start-up time (from the run call to the first collective done on every rank) and images/s.
The runners take turns (A B C A B C ...) so that machine noise hits each alike; every run is
printed, then the median and best of each.

Each run trains examples/pytorch/fashion_mnist.py's small CNN on 2 ranks (1 thread each) for
--steps steps of --batch images per rank (random images of Fashion-MNIST's shape: the data path
is not what is compared), after --warmup steps. Spark: a local-cluster master with 2 one-core
workers, whose executors are started before the first timed run (a warm session, as in a
notebook); its first run is reported apart. Ray: a head with 2 CPUs; "ray" is start() + run()
on fresh actors, "ray warm" a second run() on the same actors.

usage: PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python benchmarks/training/runners_bench.py [--repeat 5]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch")


def train(examples_dir, steps, warmup, batch):
    """One rank: (time.time() when its first collective returned, images/s of the timed steps)."""
    sys.path.insert(0, examples_dir)
    import fashion_mnist
    import torch

    import hora.torch as hvd

    hvd.init()
    hvd.allreduce(torch.zeros(1), name="first")
    first = time.time()
    torch.set_num_threads(1)
    torch.manual_seed(hvd.rank())
    model = fashion_mnist.small_cnn()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return first, steps * batch * hvd.size() / (time.perf_counter() - start)


def measure(run):
    """(start-up ms: call to the last rank's first collective, images/s as rank 0 measured)."""
    called = time.time()
    results = run()
    return (max(r[0] for r in results) - called) * 1000, results[0][1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    job = (os.path.abspath(EXAMPLES), args.steps, args.warmup, args.batch)

    import hora
    import ray
    from pyspark.sql import SparkSession

    import hora.spark
    from hora.ray import RayExecutor

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="ray-bench-"))
    try:
        cold = measure(lambda: hora.spark.run(train, args=job, num_proc=2))
        print(f"spark, first run (executors start): start-up {cold[0]:.0f} ms, {cold[1]:.0f} images/s")

        def ray_fresh():
            """start() + run() on fresh actors, then a second run() on the same actors."""
            called = time.time()
            executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
            executor.start()
            try:
                results = executor.run(train, args=list(job))
                fresh = ((max(r[0] for r in results) - called) * 1000, results[0][1])
                warm = measure(lambda: executor.run(train, args=list(job)))
            finally:
                executor.shutdown()
            return fresh, warm

        runs = {"horarun": [], "spark": [], "ray": [], "ray warm": []}
        print(f"{'run':>3} {'runner':>9} {'start-up ms':>12} {'images/s':>9}")
        for i in range(args.repeat):
            results = [("horarun", measure(lambda: hora.run(train, args=job, np=2))),
                       ("spark", measure(lambda: hora.spark.run(train, args=job, num_proc=2)))]
            fresh, warm = ray_fresh()
            results += [("ray", fresh), ("ray warm", warm)]
            for name, (startup, rate) in results:
                runs[name].append((startup, rate))
                print(f"{i:>3} {name:>9} {startup:>12.0f} {rate:>9.0f}")
        print(f"\n{'runner':>9} {'start-up ms median':>19} {'best':>6} {'images/s median':>16} {'best':>6}")
        for name, values in runs.items():
            s, r = [v[0] for v in values], [v[1] for v in values]
            print(f"{name:>9} {statistics.median(s):>19.0f} {min(s):>6.0f} {statistics.median(r):>16.0f} {max(r):>6.0f}")
    finally:
        ray.shutdown()
        spark.stop()


if __name__ == "__main__":
    main()
