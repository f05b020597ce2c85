#!/usr/bin/env python3
"""examples/pytorch/fashion_mnist.py on Ray: RayExecutor runs it on N actors (horovod.ray's
API). Arguments after `--` go to the training script.

    .venv/bin/python examples/ray/fashion_mnist_ray.py --num-workers 2 -- --model cnn --epochs 1 --no-progress
    .venv/bin/python examples/ray/fashion_mnist_ray.py --address <head>:6379 --num-hosts 2 -- ...
    .venv/bin/python examples/ray/fashion_mnist_ray.py --address <head>:6379 --min-workers 1 --max-workers 4 \\
        -- --epochs 2 --commit-every 20

With --min-workers the job is elastic: examples/pytorch/fashion_mnist_elastic.py on one actor
per CPU of the cluster's nodes (at most --max-workers), growing onto nodes that join and
shrinking, from its last commit, when an actor or a node dies (docs/spark_ray.md).

Without --address, ray.init() starts a one-node cluster here. The data set must be readable at
the same path on every node (--data-dir).
"""

import argparse
import os
import sys

TRAINING_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch")


def train(argv):
    """One rank: runs the training script's main() with argv; rank 0's accuracy line is printed."""
    import fashion_mnist

    sys.argv = ["fashion_mnist.py"] + list(argv)
    fashion_mnist.main()
    return "done"


def train_elastic(argv):
    """One elastic worker: fashion_mnist_elastic.py's main() with argv."""
    import fashion_mnist_elastic

    sys.argv = ["fashion_mnist_elastic.py"] + list(argv)
    fashion_mnist_elastic.main()
    return "done"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default=None, help="a running cluster's head (default: start one here)")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--num-hosts", type=int, default=None, help="instead of --num-workers: one rank on each of N nodes")
    p.add_argument("--cpus-per-worker", type=int, default=1)
    p.add_argument("--min-workers", type=int, default=None, help="elastic: the fewest workers to train with")
    p.add_argument("--max-workers", type=int, default=None, help="elastic: the most workers")
    p.add_argument("argv", nargs="*", help="the training script's arguments (after --)")
    args = p.parse_args()

    import ray
    from hora.ray import RayExecutor

    # The actors import the training script from its directory.
    training_dir = os.path.abspath(TRAINING_DIR)
    ray.init(address=args.address, runtime_env={"env_vars": {"PYTHONPATH": training_dir}})
    settings = RayExecutor.create_settings(timeout_s=60)
    fn = train
    if args.min_workers:
        executor = RayExecutor(settings, min_workers=args.min_workers, max_workers=args.max_workers,
                               cpus_per_worker=args.cpus_per_worker)
        fn = train_elastic
    elif args.num_hosts:
        executor = RayExecutor(settings, num_hosts=args.num_hosts, cpus_per_worker=args.cpus_per_worker)
    else:
        executor = RayExecutor(settings, num_workers=args.num_workers, cpus_per_worker=args.cpus_per_worker)
    executor.start()
    try:
        print(executor.run(fn, args=[args.argv]))
    finally:
        executor.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
