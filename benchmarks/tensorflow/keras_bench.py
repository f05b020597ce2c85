#!/usr/bin/env python3
"""Keras training throughput: hora.tensorflow.keras vs TensorFlow's MultiWorkerMirroredStrategy
vs the compute-only bound, same model, global batch and data, every configuration interleaved in
one run (so that the machine's noise hits each alike).

Configurations, for each N of --np and each model of --models (images/s over the timed steps
after the warm-up steps, from Keras' own model.fit):
  hora    horarun -np N: hvd.DistributedOptimizer + BroadcastGlobalVariablesCallback
  mwms    N processes with TF_CONFIG on loopback ports, tf.distribute.MultiWorkerMirroredStrategy
          (ring all-reduce over gRPC, TensorFlow's collective for CPUs), the dataset distributed
          with distribute_datasets_from_function
  barrier horarun -np N, each rank training alone (no gradient exchange) but meeting the others
          once per step in a 4-byte hvd.allreduce (eager, after the step): what synchronizing
          the ranks every step costs by itself, the floor under any exchange of gradients
  alone   horarun -np N, hvd.init() and nothing more: each rank trains alone, measured as the
          bound is; what running under horarun with hora's threads costs without any meeting
  bound   N plain Keras processes at once, each training alone on its share of the batch, no
          exchange at all: their images/s together, over the window in which all of them are in
          their timed steps (common_window_rate), is what N ranks could reach if communication
          cost nothing. Beside it, "bound in lockstep": the bound's own steps as if its processes
          had met after each (every step as long as its slowest process's): an estimate of what
          the step-time jitter alone costs a synchronous job (rough: a rank that waits gives its
          core to the others, which the estimate leaves out)
Every process runs 1 intra-op and 1 inter-op thread (N ranks x 1 thread; at N = 4 the ranks
share the 2 cores). The images are random, of Fashion-MNIST's shape, held in memory: the data
pipeline is not what is compared.

Models: cnn, the small CNN of examples/pytorch (434k parameters, global batch 128); wrn, the
tutorial's WideResNet (examples/keras/fashion_mnist.py's architecture, --depth/--width, global
batch 32 as in the tutorial).

usage: .venv/bin/python benchmarks/tensorflow/keras_bench.py [--np 2 4] [--models cnn wrn]
           [--configs hora mwms bound (barrier alone)] [--repeat 3] [--hora-variant K=V] [--python .venv/bin/python] [--json FILE]
           (prints markdown; --hosts NS:ADDR NS:ADDR --ssh-key KEY puts one rank on each of
           those network namespaces: benchmarks/multihost/keras_tbf.sh sets them up)
"""

import argparse
import bisect
import importlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
GLOBAL_BATCH = {"cnn": 128, "wrn": 32}
CONFIGS = ("hora", "mwms", "barrier", "alone", "bound")
RESULT = re.compile(r"RESULT rank=(\d+) images_per_s=(\S+)")
STEP_ENDS = re.compile(r"STEP_ENDS rank=(\d+) images_per_step=(\d+) (\[.*\])")


# --- one process ---------------------------------------------------------------------------

def build_model(name, depth, width):
    import tensorflow as tf
    from tensorflow.keras import layers

    if name == "cnn":
        return tf.keras.Sequential([
            layers.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2), layers.Flatten(),
            layers.Dense(45, activation="relu"), layers.Dense(10)])

    def conv_bn_relu(x, channels):
        x = layers.Conv2D(channels, 3, padding="same")(x)
        return layers.Activation("relu")(layers.BatchNormalization()(x))

    inputs = layers.Input((28, 28, 1))
    x = conv_bn_relu(inputs, 16)
    for stage, channels in enumerate((16 * width, 32 * width, 64 * width)):
        if stage:
            x = layers.MaxPooling2D(2)(x)
        for block in range((depth - 4) // 6):
            shortcut = layers.Conv2D(channels, 1)(x) if block == 0 else x
            y = layers.Dropout(0.01)(conv_bn_relu(x, channels))
            x = layers.Add()([shortcut, conv_bn_relu(y, channels)])
    outputs = layers.Dense(10)(layers.GlobalAveragePooling2D()(x))
    return tf.keras.Model(inputs, outputs)


def random_images(batch, seed):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    images = rng.random((16 * batch, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 16 * batch)
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(batch).prefetch(4)


def step_clock(warmup):
    """A Keras callback noting, on the system-wide monotonic clock (comparable across the
    processes of one host), the end of the last warm-up step and of every step after it."""
    import tensorflow as tf

    class StepClock(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            if batch >= warmup - 1:
                self.ends.append(time.monotonic())

    return StepClock()


def step_barrier(hvd):
    import tensorflow as tf

    class StepBarrier(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            hvd.allreduce(tf.constant([1.0]), name="step_barrier")

    return StepBarrier()


def worker(args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    per_rank = GLOBAL_BATCH[args.model] // args.ranks
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    callbacks, rank = [], 0
    if args.worker == "mwms":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING))
        rank = strategy.cluster_resolver.task_id
        with strategy.scope():
            model = build_model(args.model, args.depth, args.width)
            model.compile(optimizer=tf.keras.optimizers.SGD(0.01, momentum=0.9), loss=loss)
        data = strategy.distribute_datasets_from_function(
            lambda context: random_images(context.get_per_replica_batch_size(per_rank * args.ranks),
                                          context.input_pipeline_id))
    else:
        model = build_model(args.model, args.depth, args.width)
        optimizer = tf.keras.optimizers.SGD(0.01, momentum=0.9)
        if args.worker in ("hora", "barrier", "alone"):
            hvd = importlib.import_module(args.api)
            hvd.init()
            rank = hvd.rank()
        if args.worker == "hora":
            optimizer = hvd.DistributedOptimizer(optimizer)
            callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
        elif args.worker == "barrier":
            callbacks.append(step_barrier(hvd))
        elif args.worker == "bound":
            rank = int(os.environ.get("BENCH_INDEX", "0"))
        model.compile(optimizer=optimizer, loss=loss)
        data = random_images(per_rank, rank)
    clock = step_clock(args.warmup)
    model.fit(data, steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0,
              callbacks=callbacks + [clock])
    alone = args.worker in ("bound", "alone")
    images = args.steps * (per_rank if alone else per_rank * args.ranks)
    print(f"RESULT rank={rank} images_per_s={images / (clock.ends[-1] - clock.ends[0]):.2f}", flush=True)
    if alone:
        print(f"STEP_ENDS rank={rank} images_per_step={per_rank} {json.dumps(clock.ends)}", flush=True)


# --- the driver ------------------------------------------------------------------------------

def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def commands_for(config, n, argv, env, args):
    """[(command, env)] of the processes of one run. With --hosts, rank i runs on host i (inside
    its network namespace): hora through horarun's ssh launch from the first host, MWMS with
    the hosts' addresses in TF_CONFIG."""
    hosts = args.hosts or [(None, "127.0.0.1")] * n
    on_host = [["ip", "netns", "exec", ns] if ns else [] for ns, _ in hosts]
    if config in ("hora", "barrier", "alone"):
        horarun = [os.path.join(os.path.dirname(args.python), "horarun"), "-np", str(n)]
        if args.hosts:
            horarun += ["-i", args.ssh_key, "-H", ",".join(f"{ip}:1" for _, ip in hosts),
                        "-x", "OMP_NUM_THREADS=1", "-x", "TF_CPP_MIN_LOG_LEVEL=2"]
        return [(on_host[0] + horarun + argv, env)]
    if config == "mwms":
        cluster = {"worker": [f"{ip}:{port}" for (_, ip), port in zip(hosts, free_ports(n))]}
        return [(on_host[i] + argv, dict(env, TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}))) for i in range(n)]
    return [(on_host[i] + argv, dict(env, BENCH_INDEX=str(i))) for i in range(n)]


def variant_of(config):
    """("hora", {knob: value}) for a --hora-variant configuration "hora[NAME=VALUE,...]";
    (config, {}) for the others."""
    if not config.startswith("hora["):
        return config, {}
    return "hora", dict(kv.split("=", 1) for kv in config[len("hora["):-1].split(","))


def run_config(config, model, n, args):
    """images/s of one run: rank 0's for hora and mwms, the processes' together for bound and
    alone."""
    config, knobs = variant_of(config)
    argv = [args.python, HERE, "--worker", config, "--model", model, "--ranks", str(n),
            "--depth", str(args.depth), "--width", str(args.width), "--steps", str(args.steps[model]),
            "--warmup", str(args.warmup)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", **knobs)
    with tempfile.TemporaryDirectory() as logs:
        processes, files = [], []
        for i, (command, command_env) in enumerate(commands_for(config, n, argv, env, args)):
            files.append(open(os.path.join(logs, f"{i}.log"), "w+"))
            processes.append(subprocess.Popen(command, env=command_env, stdout=files[-1], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + args.timeout
        try:
            for p in processes:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise RuntimeError(f"{config} {model} np={n}: no result within {args.timeout} s")
        outputs = []
        for f in files:
            f.seek(0)
            outputs.append(f.read())
            f.close()
    results = {int(rank): float(value) for out in outputs
               for rank, value in RESULT.findall(out)}  # horarun prefixes lines with "[rank]<stdout>:"
    if any(p.returncode for p in processes) or len(results) != n:
        raise RuntimeError(f"{config} {model} np={n} failed:\n" + "\n".join(o[-3000:] for o in outputs))
    if config not in ("bound", "alone"):
        return results[0], {}
    steps = [(json.loads(ends), int(per_step)) for out in outputs
             for _, per_step, ends in STEP_ENDS.findall(out)]
    return common_window_rate(steps), {"own_windows": sum(results.values()), "lockstep": lockstep_rate(steps)}


def common_window_rate(processes):
    """images/s of the bound's processes [(step end times, images per step)] over the window in
    which all of them were in their timed steps. Their own windows differ (each starts when its
    process is through start-up and warm-up), and a process training while another still starts
    or has finished has more of the CPU than while all train: the sum of their own rates
    overstates what N concurrent ranks reach, most when N ranks share fewer cores."""
    start = max(ends[0] for ends, _ in processes)
    end = min(ends[-1] for ends, _ in processes)
    if end <= start:
        raise RuntimeError("the bound's processes never trained at the same time: give more --steps")
    images = sum(per_step * (steps_done(ends, end) - steps_done(ends, start)) for ends, per_step in processes)
    return images / (end - start)


def lockstep_rate(processes):
    """images/s the bound's processes [(step end times, images per step)] would reach had they
    met after every step, each step taking as long as its slowest process's same step did: the
    cost of synchronizing alone, from the processes' own step-time jitter (any synchronous
    exchange pays it; the steps' durations are taken as they were, though waiting would change
    how the processes share the cores)."""
    durations = [[b - a for a, b in zip(ends, ends[1:])] for ends, _ in processes]
    steps = min(len(d) for d in durations)
    seconds = sum(max(d[k] for d in durations) for k in range(steps))
    return steps * sum(per_step for _, per_step in processes) / seconds


def steps_done(ends, t):
    """Steps a process completed by time t after its first timed step began (ends[0]),
    interpolated within the step that t falls in."""
    i = bisect.bisect_right(ends, t)
    if i == 0:
        return 0.0
    if i == len(ends):
        return float(len(ends) - 1)
    return i - 1 + (t - ends[i - 1]) / (ends[i] - ends[i - 1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--api", default="hora.tensorflow.keras", help=argparse.SUPPRESS)  # or Horovod's
    parser.add_argument("--np", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--models", nargs="+", default=["cnn", "wrn"], choices=sorted(GLOBAL_BATCH))
    parser.add_argument("--depth", type=int, default=16, help="WideResNet depth (the tutorial's 16)")
    parser.add_argument("--width", type=int, default=10, help="WideResNet width (the tutorial's 10)")
    parser.add_argument("--configs", nargs="+", default=["hora", "mwms", "bound"], choices=CONFIGS)
    parser.add_argument("--hora-variant", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                        help="also run hora with these knobs, interleaved with the rest (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default: cnn 300, wrn 12)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", help="write every run here too")
    parser.add_argument("--hosts", nargs="+", metavar="NAMESPACE:ADDRESS",
                        help="one rank per host, each a network namespace (benchmarks/multihost/keras_tbf.sh)")
    parser.add_argument("--ssh-key", help="with --hosts: the key horarun logs in to the hosts with")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.hosts:
        args.hosts = [tuple(h.split(":")) for h in args.hosts]
        args.np = [len(args.hosts)]
    args.steps = {m: args.steps or {"cnn": 300, "wrn": 12}[m] for m in GLOBAL_BATCH}
    variants = [f"hora[{v}]" for v in args.hora_variant]
    args.configs += variants

    runs = {}  # (model, n, config) -> [images/s per repeat]
    for repeat in range(args.repeat):
        for model in args.models:
            for n in args.np:
                for config in args.configs:
                    value, detail = run_config(config, model, n, args)
                    runs.setdefault(f"{model} np={n} {config}", []).append(value)
                    for key, extra in detail.items():
                        runs.setdefault(f"{model} np={n} {config} {key}", []).append(extra)
                    print(f"# repeat {repeat + 1}: {model} np={n} {config}: {value:.1f} images/s "
                          + "".join(f"({k}: {v:.1f}) " for k, v in detail.items())
                          + f"(load {os.getloadavg()[0]:.1f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    names = {"hora": "hora", "mwms": "MWMS", "barrier": "barrier", "alone": "alone", "bound": "bound"}
    ratios = [(a, b) for a, b in (("hora", "mwms"), ("hora", "bound"), ("barrier", "bound"), ("alone", "bound"),
                                  ("hora", "barrier"))
              if {a, b} <= set(args.configs)]
    ratios += [(v, b) for v in variants for b in ("bound", "hora") if b in args.configs]
    lockstep = "bound" in args.configs  # the bound's steps, as if it met after each (lockstep_rate)
    print("\n| model | ranks | " + " | ".join(f"{names.get(c, c)} images/s" for c in args.configs) + " | "
          + " | ".join(f"{names.get(a, a)} / {names.get(b, b)}" for a, b in ratios)
          + (" | bound in lockstep / bound" if lockstep else "") + " |")
    print("|---|---|" + "---|" * (len(args.configs) + len(ratios) + lockstep))
    med = statistics.median
    for model in args.models:
        for n in args.np:
            runs_of = {c: runs[f"{model} np={n} {c}"] for c in args.configs}
            cells = [f"{med(v):.1f} ({' / '.join(f'{x:.1f}' for x in v)})" for v in runs_of.values()]
            columns = [(runs_of[a], runs_of[b]) for a, b in ratios]
            if lockstep:
                columns.append((runs[f"{model} np={n} bound lockstep"], runs_of["bound"]))
            for tops, bottoms in columns:
                pairs = [x / y for x, y in zip(tops, bottoms)]
                cells.append(f"{med(pairs):.2f} ({' / '.join(f'{r:.2f}' for r in pairs)})")
            print(f"| {model} | {n} | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    sys.exit(main())
