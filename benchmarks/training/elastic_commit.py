#!/usr/bin/env python3
"""The cost of hvd.elastic's state.commit() against a training step, for the Fashion-MNIST CNN
(examples/pytorch/fashion_mnist.py's small_cnn) on synthetic images.

    horarun -np 2 --min-np 1 python benchmarks/training/elastic_commit.py

Prints the median step time, the median commit time, and the commit's share of a step at a
commit every 10 steps (commit / (10 x step))."""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import hora.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
import fashion_mnist as example  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=64)
p.add_argument("--steps", type=int, default=60)
p.add_argument("--every", type=int, default=10)
args = p.parse_args()

hvd.init()
torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
model = example.small_cnn()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
x, y = torch.randn(args.batch_size, 1, 28, 28), torch.randint(0, 10, (args.batch_size,))
steps, commits = [], []


@hvd.elastic.run
def train(state):
    while state.batch < args.steps:
        start = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        steps.append(time.perf_counter() - start)
        state.batch += 1
        if state.batch % args.every == 0:
            start = time.perf_counter()
            state.commit()
            commits.append(time.perf_counter() - start)


train(state)
step, commit = statistics.median(steps[5:]), statistics.median(commits)
hvd.log(f"{hvd.size()} ranks, batch {args.batch_size}: step {step * 1000:.1f} ms, commit {commit * 1000:.2f} ms "
        f"(every run: {', '.join(f'{c * 1000:.2f}' for c in commits)}), commit every {args.every} steps = "
        f"{100 * commit / (args.every * step):.2f}% of the steps' time")
