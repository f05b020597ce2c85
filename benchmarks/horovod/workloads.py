#!/usr/bin/env python3
"""The workloads of the side-by-side runs, written against Horovod's PyTorch API only
(`import horovod.torch as hvd`), so that one file runs under Horovod 0.28.1 and, unchanged,
under hora through its `horovod` alias. side_by_side.py starts it with each framework's
horovodrun; lines starting with RESULT (rank 0) and STEP carry what the driver reads.

  cnn        the Fashion-MNIST example's small CNN (examples/pytorch/fashion_mnist.py's
             small_cnn, read from that file), DistributedOptimizer, global batch 128 of random
             images: images/s over the timed steps
  wrn        the same with the example's WRN-16-10 (wide_resnet(10)), global batch 32
  tta        the CNN on the real Fashion-MNIST (the example's loader; Debian's
             dataset-fashion-mnist) to --target test accuracy: the same seed and data order on
             both frameworks, the test set evaluated every --eval-every steps; seconds and steps
  allreduce  hvd.allreduce(op=hvd.Sum) of 4 bytes (latency) and of 1, 16, 64 MiB (busbw)
  elastic    hvd.elastic.run over the CNN, a commit every step; prints one STEP line per step
  fail       allreduces of 1 MiB in a loop, a STEP line each, until the driver kills or stops a
             rank (--mode kill/stop), or, with --mode mismatch, one allreduce whose shape differs
             between ranks under one name
"""

import argparse
import ast
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

import horovod.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch", "fashion_mnist.py")


def from_example(*names):
    """The example's top-level definitions `names` (with those they use), compiled from the
    example's own source: the example imports hora, which Horovod's environment does not have,
    so the module itself is not imported."""
    with open(EXAMPLE) as f:
        tree = ast.parse(f.read())
    wanted = ("read_idx", "load", "cbr", "ConvBlock", "wide_resnet", "small_cnn")
    nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in wanted]
    scope = {"nn": nn, "torch": torch, "np": np, "gzip": gzip, "os": os}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), EXAMPLE, "exec"), scope)
    return [scope[name] for name in names]


def build(model):
    """(the model, its global batch)"""
    small_cnn, wide_resnet = from_example("small_cnn", "wide_resnet")
    return (small_cnn(), 128) if model == "cnn" else (wide_resnet(10), 32)


def result(**fields):
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(fields), flush=True)


def throughput(args):
    torch.manual_seed(1)
    model, global_batch = build(args.workload)
    batch = global_batch // hvd.size()
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - start
    result(workload=args.workload, size=hvd.size(), images_per_sec=batch * hvd.size() * args.steps / elapsed,
           step_ms=1000 * elapsed / args.steps)


def time_to_accuracy(args):
    """Rank r trains on images r, r + n, ... of each global batch of 128 drawn in one seeded order;
    the test set is split across the ranks and its accuracy summed with an allreduce."""
    torch.manual_seed(1)
    model, global_batch = build("cnn")
    rank, size = hvd.rank(), hvd.size()
    batch = global_batch // size
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    (load,) = from_example("load")
    x_train, y_train, x_test, y_test = load(args.data_dir)
    mean, std = x_train.float().mean() / 255, x_train.float().std() / 255
    prepare = lambda x: ((x.float() / 255 - mean) / std).unsqueeze(1)
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(7))
    mine = slice(rank, len(x_test), size)
    loss_fn = nn.CrossEntropyLoss()

    def evaluate():
        model.eval()
        correct = 0.0
        with torch.no_grad():
            for x, y in zip(x_test[mine].split(64), y_test[mine].split(64)):
                correct += (model(prepare(x)).argmax(1) == y).float().sum().item()
        model.train()
        stats = hvd.allreduce(torch.tensor([correct, float(len(y_test[mine]))]), op=hvd.Sum, name="eval")
        return (stats[0] / stats[1]).item()

    start, step, accuracy = time.perf_counter(), 0, 0.0
    while accuracy < args.target and time.perf_counter() - start < args.cap:
        for i in range(step, step + args.eval_every):
            idx = order[(i * global_batch + rank * batch) % len(order):][:batch]
            opt.zero_grad()
            loss_fn(model(prepare(x_train[idx])), y_train[idx]).backward()
            opt.step()
        step += args.eval_every
        accuracy = evaluate()
    result(workload="tta", size=size, seconds=time.perf_counter() - start, steps=step, accuracy=accuracy,
           reached=accuracy >= args.target)


def allreduce(args):
    n = hvd.size()
    t = torch.ones(1)
    for i in range(20):
        hvd.allreduce(t, op=hvd.Sum, name="lat")
    start = time.perf_counter()
    for i in range(args.lat_iters):
        hvd.allreduce(t, op=hvd.Sum, name="lat")
    lat_us = 1e6 * (time.perf_counter() - start) / args.lat_iters
    busbw = {}
    for mib, iters in ((1, 20), (16, 5), (64, 3)):
        t = torch.ones(mib << 18)  # float32: 2^18 per MiB
        for _ in range(2):
            out = hvd.allreduce(t, op=hvd.Sum, name=f"bw{mib}")
        start = time.perf_counter()
        for _ in range(iters):
            out = hvd.allreduce(t, op=hvd.Sum, name=f"bw{mib}")
        seconds = (time.perf_counter() - start) / iters
        assert float(out[0]) == n and float(out[-1]) == n
        busbw[f"{mib}MiB"] = (mib << 20) * 2 * (n - 1) / n / seconds / 1e9
    result(workload="allreduce", size=n, latency_4B_us=lat_us, busbw_GBps=busbw)


def elastic(args):
    torch.manual_seed(1)
    model, _ = build("cnn")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    x = torch.randn(32, 1, 28, 28)
    y = torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            state.step += 1
            print(f"STEP {state.step} size {hvd.size()} rank {hvd.rank()} pid {os.getpid()} "
                  f"t {time.time():.6f}", flush=True)
            state.commit()

    train(state)


def fail(args):
    if args.mode == "mismatch":
        t = torch.ones(2 + hvd.rank())
        print(f"STEP 0 size {hvd.size()} rank {hvd.rank()} pid {os.getpid()} t {time.time():.6f}",
              flush=True)
        hvd.allreduce(t, name="mismatched")
        print(f"rank {hvd.rank()}: the mismatched allreduce returned", flush=True)
        return
    t = torch.ones(1 << 18)
    step = 0
    while True:
        hvd.allreduce(t, name="loop")
        step += 1
        print(f"STEP {step} size {hvd.size()} rank {hvd.rank()} pid {os.getpid()} t {time.time():.6f}",
              flush=True)
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["cnn", "wrn", "tta", "allreduce", "elastic", "fail"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lat-iters", type=int, default=500)
    p.add_argument("--mode", choices=["kill", "stop", "mismatch"], default="kill")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--cap", type=float, default=600, help="tta: seconds before giving up")
    args = p.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    {"cnn": throughput, "wrn": throughput, "tta": time_to_accuracy, "allreduce": allreduce, "elastic": elastic,
     "fail": fail}[args.workload](args)


if __name__ == "__main__":
    sys.exit(main())
