#!/usr/bin/env python3
"""Fashion-MNIST training throughput: hora vs PyTorch DDP (gloo) vs one process, same model and
global batch, all in one run (so that the machine's noise hits every configuration alike).

Configurations (images/sec over --steps timed steps after --warmup steps):
  1 process x 1 thread, 1 process x 2 threads (global batch on one process),
  hora 2 x 1 thread (DistributedOptimizer), DDP gloo 2 x 1 thread,
  DDP with gradient sync off (no_sync: the compute-only bound of 2 x 1 thread).
Then, with --time-to-accuracy, the time for hora and DDP to reach --target on the test set
(the CNN, full data, same seed, evaluated after every --eval-every steps).

usage: benchmarks/training/train_bench.py [--models cnn wrn] [--repeat 3]     (prints markdown)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

GLOBAL_BATCH = {"cnn": 128, "wrn": 32}


def build(model, width):
    import fashion_mnist as fm
    return fm.small_cnn() if model == "cnn" else fm.wide_resnet(width)


# --- workers -----------------------------------------------------------------------------------

def worker(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    kind = args.worker
    rank, size = 0, 1
    if kind == "hora":
        import hora.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    elif kind in ("ddp", "ddp-nosync"):
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = build(args.model, args.width)
    batch = GLOBAL_BATCH[args.model] // size
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    if kind == "hora":
        compression = hvd.Compression.fp16 if args.fp16 else hvd.Compression.none
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression)
        hvd.broadcast_parameters(model.state_dict(), 0)
    elif kind.startswith("ddp"):
        model = torch.nn.parallel.DistributedDataParallel(model)
        if args.fp16:  # DDP's counterpart of Compression.fp16
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
            model.register_comm_hook(None, fp16_compress_hook)

    def barrier():
        if kind == "hora":
            hvd.barrier()
        elif kind.startswith("ddp"):
            dist.barrier()

    if args.target:  # time to accuracy on the real data
        import fashion_mnist as fm
        x_train, y_train, x_test, y_test = fm.load(fm.DATA)
        mean, std = x_train.float().mean() / 255, x_train.float().std() / 255
        prep = lambda x: ((x.float() / 255 - mean) / std).unsqueeze(1)
        g = torch.Generator().manual_seed(7)
        order = torch.randperm(len(x_train), generator=g)
        mine_test = slice(rank, len(x_test), size)
        barrier()
        start, step, accuracy = time.time(), 0, 0.0
        while accuracy < args.target and time.time() - start < 600:
            for _ in range(args.eval_every):
                idx = order[(step * GLOBAL_BATCH[args.model] + rank * batch) % len(order):][:batch]
                opt.zero_grad()
                F.cross_entropy(model(prep(x_train[idx])), y_train[idx]).backward()
                opt.step()
                step += 1
            model.eval()
            with torch.no_grad():
                correct = (model(prep(x_test[mine_test])).argmax(1) == y_test[mine_test]).float().sum()
            model.train()
            stats = torch.tensor([correct.item(), float(len(y_test[mine_test]))])
            if kind == "hora":
                stats = hvd.allreduce(stats, op=hvd.Sum, name="eval")
            else:
                dist.all_reduce(stats)
            accuracy = (stats[0] / stats[1]).item()
        result = {"seconds": time.time() - start, "steps": step, "accuracy": accuracy}
    else:
        x = torch.randn(batch, 1, 28, 28)
        y = torch.randint(0, 10, (batch,))

        def step():
            opt.zero_grad()
            if kind == "ddp-nosync":
                with model.no_sync():
                    F.cross_entropy(model(x), y).backward()
            else:
                F.cross_entropy(model(x), y).backward()
            opt.step()

        for _ in range(args.warmup):
            step()
        barrier()
        start = time.time()
        for _ in range(args.steps):
            step()
        barrier()
        elapsed = time.time() - start
        result = {"images_per_sec": args.steps * batch * size / elapsed}
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    if kind == "hora":
        hvd.shutdown()
    elif kind.startswith("ddp"):
        dist.destroy_process_group()


# --- driver ------------------------------------------------------------------------------------

def run_config(kind, model, width, steps, warmup, threads=1, target=0.0, eval_every=50, timeout=3600):
    base = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", model, "--width", str(width),
            "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads),
            "--target", str(target), "--eval-every", str(eval_every)]
    env = dict(os.environ, HORA_LOG_LEVEL="error")
    if kind == "hora":
        horarun = os.path.join(os.path.dirname(sys.executable), "horarun")
        out = subprocess.run([horarun, "-np", "2"] + base, capture_output=True, text=True, env=env, timeout=timeout)
        text = out.stdout
    elif kind.startswith("ddp"):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                                           WORLD_SIZE="2"))
                 for r in range(2)]
        text = ""
        for p in procs:
            try:
                o, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:  # torch 1.13 + gloo sometimes hangs at exit
                p.kill()
                o, _ = p.communicate()
            text += o
    else:
        out = subprocess.run(base, capture_output=True, text=True, env=env, timeout=timeout)
        text = out.stdout
    for line in text.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    raise RuntimeError(f"{kind} {model} produced no result:\n{text}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", default="")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--models", nargs="+", default=["cnn", "wrn"])
    ap.add_argument("--width", type=int, default=10)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--fp16", action="store_true", help="worker: fp16 gradient compression")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--time-to-accuracy", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    configs = [("1 process x 1 thread", "single", 1), ("1 process x 2 threads", "single", 2),
               ("hora 2 x 1 thread", "hora", 1), ("DDP (gloo) 2 x 1 thread", "ddp", 1),
               ("DDP, gradient sync off (compute bound)", "ddp-nosync", 1)]
    print("| model | configuration | images/sec (median) | best | vs DDP | vs compute bound |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model in args.models:
        steps, warmup = (60, 10) if model == "cnn" else (6, 2)
        samples = {name: [] for name, _, _ in configs}
        for _ in range(args.repeat):  # interleaved
            for name, kind, threads in configs:
                samples[name].append(run_config(kind, model, args.width, steps, warmup, threads)["images_per_sec"])
        med = {k: statistics.median(v) for k, v in samples.items()}
        label = "CNN" if model == "cnn" else f"WRN-16-{args.width}"
        for name, _, _ in configs:
            print(f"| {label} (global batch {GLOBAL_BATCH[model]}) | {name} | {med[name]:.1f} | {max(samples[name]):.1f} | "
                  f"{med[name] / med['DDP (gloo) 2 x 1 thread']:.3f} | "
                  f"{med[name] / med['DDP, gradient sync off (compute bound)']:.3f} |", flush=True)
    if args.time_to_accuracy:
        print("\n| model | framework | seconds to 85% test accuracy (median) | runs |")
        print("| --- | --- | --- | --- |")
        for name, kind in [("hora", "hora"), ("DDP (gloo)", "ddp")]:
            runs = [run_config(kind, "cnn", 1, 0, 0, 1, target=0.85) for _ in range(args.repeat)]
            secs = [r["seconds"] for r in runs]
            print(f"| CNN (global batch 128) | {name} | {statistics.median(secs):.1f} | "
                  + ", ".join(f"{r['seconds']:.1f} s / {r['steps']} steps / {r['accuracy']:.3f}" for r in runs) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
