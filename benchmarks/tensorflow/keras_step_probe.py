#!/usr/bin/env python3
"""Where one rank's Keras step goes: the wall time per step of model.fit and, per thread, CPU
time, time runnable but waiting for a CPU, and runs on a CPU per step (schedstat, as
benchmarks/training/step_probe.py for torch), and the engine's counters per step, all read
around the timed steps from inside model.fit. The models and data of keras_bench.py, 1 intra-op
and 1 inter-op thread per rank. `hora` trains with hvd.DistributedOptimizer, `alone` only calls
hvd.init() and trains by itself (the same process without the exchange).

usage (every rank prints its RESULT line and its threads):
  horarun -np 4 .venv/bin/python benchmarks/tensorflow/keras_step_probe.py hora --model cnn --steps 300
  horarun -np 4 .venv/bin/python benchmarks/tensorflow/keras_step_probe.py alone --model cnn --steps 300
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "training"))
import keras_bench  # noqa: E402  (build_model, random_images, GLOBAL_BATCH)
import train_bench  # noqa: E402  (thread_cpu)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["hora", "alone"])
    parser.add_argument("--model", default="cnn", choices=sorted(keras_bench.GLOBAL_BATCH))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--per-thread", action="store_true", help="each thread apart, not summed by name")
    args = parser.parse_args()
    import tensorflow as tf

    import hora.tensorflow.keras as hvd
    from hora import _core

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    model = keras_bench.build_model(args.model, 16, 10)
    optimizer, callbacks = tf.keras.optimizers.SGD(0.01, momentum=0.9), []
    if args.kind == "hora":
        optimizer = hvd.DistributedOptimizer(optimizer)
        callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    per_rank = keras_bench.GLOBAL_BATCH[args.model] // hvd.size()
    marks = {}

    class Marks(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch in (args.warmup - 1, args.warmup + args.steps - 1):
                marks[batch] = (time.monotonic(), train_bench.thread_cpu(), _core.engine_stats())

    model.fit(keras_bench.random_images(per_rank, hvd.rank()), steps_per_epoch=args.warmup + args.steps, epochs=1,
              verbose=0, callbacks=callbacks + [Marks()])
    report(hvd.rank(), args, per_rank * hvd.size(), marks[args.warmup - 1], marks[args.warmup + args.steps - 1])


def report(rank, args, images_per_step, first, last):
    (t0, threads0, engine0), (t1, threads1, engine1) = first, last
    steps = args.steps
    print(f"RESULT rank={rank} step_ms={(t1 - t0) / steps * 1e3:.2f} images_per_s={steps * images_per_step / (t1 - t0):.1f}")
    rows = {}
    for tid, (name, ns, waited, runs) in threads1.items():
        _, ns0, waited0, runs0 = threads0.get(tid, (name, 0, 0, 0))
        row = rows.setdefault(f"{name}/{tid}" if args.per_thread else name, [0.0, 0.0, 0.0, 0])
        row[0] += (ns - ns0) / steps / 1e6
        row[1] += (waited - waited0) / steps / 1e6
        row[2] += (runs - runs0) / steps
        row[3] += 1
    for name, (cpu, waited, runs, count) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        if cpu >= 0.05:
            print(f"  rank={rank} {name} x{count}: CPU {cpu:.2f} ms, runnable but waiting {waited:.2f} ms, "
                  f"{runs:.1f} runs on a CPU per step")
    print(f"  rank={rank} engine per step: " +
          ", ".join(f"{k} {(engine1[k] - engine0.get(k, 0)) / steps:.2f}" for k in engine1))


if __name__ == "__main__":
    main()
