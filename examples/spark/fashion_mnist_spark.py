#!/usr/bin/env python3
"""examples/pytorch/fashion_mnist.py as a Spark job: Databricks' HorovodRunner form, each rank a
Spark task of one barrier stage. Arguments after `--` go to the training script.

    export PYSPARK_PYTHON=$PWD/.venv/bin/python            # what the executors run
    .venv/bin/python examples/spark/fashion_mnist_spark.py --master 'local-cluster[2,1,1024]' \\
        --np 2 -- --model cnn --epochs 1 --no-progress
    .venv/bin/python examples/spark/fashion_mnist_spark.py --np -2 -- --model cnn --epochs 1   # no Spark

The data set must be readable at the same path on every executor (--data-dir; Debian's
dataset-fashion-mnist puts it under /usr/share/datasets/fashion-mnist).
"""

import argparse
import os
import sys

TRAINING_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch", "fashion_mnist.py")


def train(argv):
    """One rank: runs the training script's main() with argv; rank 0's accuracy line is printed."""
    import fashion_mnist  # shipped to the executors by SparkContext.addPyFile

    sys.argv = ["fashion_mnist.py"] + list(argv)
    fashion_mnist.main()
    return "done"


def run(np, argv, spark=None):
    """HorovodRunner(np).run(train): np > 0 on the active session's executors, np < 0 locally."""
    from hora.spark import HorovodRunner

    if spark is not None:
        spark.sparkContext.addPyFile(os.path.abspath(TRAINING_SCRIPT))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(TRAINING_SCRIPT)))
    return HorovodRunner(np=np).run(train, argv=argv)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default="local-cluster[2,1,1024]", help="Spark master URL")
    p.add_argument("--np", type=int, default=2, help="ranks: n Spark tasks, or -n processes on the driver")
    p.add_argument("argv", nargs="*", help="the training script's arguments (after --)")
    args = p.parse_args()
    if args.np < 0:
        print(run(args.np, args.argv))
        return
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("hora fashion-mnist")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    try:
        print(run(args.np, args.argv, spark))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
