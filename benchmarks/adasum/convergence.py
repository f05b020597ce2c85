#!/usr/bin/env python3
"""Adasum against averaging at a large global batch: the Fashion-MNIST CNN of
examples/pytorch/fashion_mnist.py, trained from the same seed with DistributedOptimizer(op=...)
for each (op, learning rate) pair; validation accuracy after every epoch.

    horarun -np 4 python benchmarks/adasum/convergence.py --out adasum.json
    python benchmarks/adasum/plot.py adasum.json docs/adasum_convergence.png   # table + plot

Every configuration runs in the same job, one after the other, from the same initial weights
and the same data order. The learning rates are the ones the optimizer uses (not scaled here):
the usual rule for averaging multiplies one worker's rate by the number of workers, while
Horovod's Adasum guide starts Adasum from one worker's rate; the grid covers both. No warm-up
and no decay, so that what diverges shows it.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import hora.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pytorch"))
import fashion_mnist as example  # noqa: E402  (the example's data loading and model)

OPS = {"average": hvd.Average, "adasum": hvd.Adasum}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ops", default="average,adasum")
    p.add_argument("--lrs", default="0.02,0.08,0.32", help="learning rates, as the optimizer uses them")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256, help="per worker")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--train-limit", type=int, default=0, help="first N training images (0 = all 60000)")
    p.add_argument("--data-dir", default=example.DATA)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", default="adasum_convergence.json", help="written by rank 0")
    return p.parse_args()


def evaluate(model, loader, prepare):
    model.eval()
    correct, count, loss = 0, 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(prepare(x))
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            count += y.shape[0]
    metrics = hvd.average_metrics({"val_accuracy": correct / count, "val_loss": loss / count})
    return metrics["val_accuracy"], metrics["val_loss"]


def train(tag, op, lr, args, data):
    """One configuration: accuracy and loss after every epoch (NaN loss once it diverged)."""
    train_set, test_set, prepare = data
    torch.manual_seed(args.seed)
    model = example.small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    # Names of their own per configuration: the engine's response cache keeps earlier ones.
    named = [(f"{tag}.{name}", p) for name, p in model.named_parameters()]
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=named, op=op)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=1000,
                             sampler=DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                                        shuffle=False))
    epochs = []
    for epoch in range(args.epochs):
        model.train()
        sampler.set_epoch(epoch)
        start, train_loss, steps = time.time(), 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(prepare(x)), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
            steps += 1
        seconds = time.time() - start
        accuracy, val_loss = evaluate(model, test_loader, prepare)
        train_loss = hvd.average_metrics({"loss": train_loss / steps})["loss"]
        epochs.append({"epoch": epoch + 1, "val_accuracy": accuracy, "val_loss": val_loss,
                       "train_loss": train_loss, "seconds": seconds})
        hvd.log(f"{tag}: epoch {epoch + 1} val_accuracy {accuracy:.4f} val_loss {val_loss:.4f} "
                f"train_loss {train_loss:.4f} ({seconds:.1f} s)")
        if not math.isfinite(train_loss):
            break  # diverged: the rest of the epochs would be NaN too
    return epochs


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    data = example.datasets(args.data_dir, args.train_limit)

    results = {"workers": hvd.size(), "batch_per_worker": args.batch_size,
               "global_batch": args.batch_size * hvd.size(), "momentum": args.momentum,
               "train_images": len(data[0]), "seed": args.seed, "runs": []}
    for lr in [float(v) for v in args.lrs.split(",")]:
        for name in args.ops.split(","):
            tag = f"{name}-lr{lr:g}"
            epochs = train(tag, OPS[name], lr, args, data)
            results["runs"].append({"op": name, "lr": lr, "epochs": epochs})
            if hvd.rank() == 0:  # after every configuration, so an interrupted run keeps its results
                with open(args.out, "w") as f:
                    json.dump(results, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
