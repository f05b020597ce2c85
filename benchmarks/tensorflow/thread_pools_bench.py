#!/usr/bin/env python3
"""What sizing TensorFlow's thread pools is worth to ranks that share a host: the small CNN's
model.fit under hora.tensorflow.keras (batch 64 per rank, random Fashion-MNIST-shaped images,
150 timed steps after 20), one horarun job per configuration, the configurations interleaved in
each round. A configuration is INTRA/INTER, each pool set by the script before hvd.init
(0 = TensorFlow's default, which hvd.init then sizes itself: Note [thread budget]), or
`default` (the script sets nothing). Prints images/s per round and the medians.

    .venv/bin/python benchmarks/tensorflow/thread_pools_bench.py --np 2 --repeat 3 --configs default 1/1 1/2
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

WORKER = r"""
import sys, time
import numpy as np
import tensorflow as tf
if sys.argv[1] != "default":
    intra, inter = map(int, sys.argv[1].split("/"))
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
import hora.tensorflow.keras as hvd
hvd.init()
model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
    tf.keras.layers.Conv2D(64, 3, activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dense(10)])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.rand(64 * 40, 28, 28, 1).astype("float32")
y = np.random.randint(0, 10, 64 * 40)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
model.fit(data, steps_per_epoch=20, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
start = time.perf_counter()
model.fit(data, steps_per_epoch=150, epochs=1, verbose=0)
seconds = time.perf_counter() - start
if hvd.rank() == 0:
    threads = tf.config.threading
    print(f"RESULT {150 * 64 * hvd.size() / seconds:.1f} intra={threads.get_intra_op_parallelism_threads()} "
          f"inter={threads.get_inter_op_parallelism_threads()}")
"""


def run(python, np_, config):
    horarun = os.path.join(os.path.dirname(python), "horarun")
    done = subprocess.run([horarun, "-np", str(np_), python, "-c", WORKER, config], capture_output=True, text=True,
                          timeout=600)
    match = re.search(r"RESULT (\S+) (.*)", done.stdout)
    if done.returncode != 0 or not match:
        sys.exit(f"{config}: the job failed\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(match.group(1)), match.group(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--configs", nargs="+", default=["default", "1/1"])
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    rates = {c: [] for c in args.configs}
    for round_ in range(1, args.repeat + 1):
        for config in args.configs:
            rate, pools = run(args.python, args.np, config)
            rates[config].append(rate)
            print(f"# round {round_}: {config}: {rate:.1f} images/s ({pools})", flush=True)
    print(f"\n| pools ({args.np} ranks) | images/s, median (every round) |\n|---|---|")
    for config, values in rates.items():
        print(f"| {config} | {statistics.median(values):.1f} ({' / '.join(f'{v:.1f}' for v in values)}) |")


if __name__ == "__main__":
    main()
