#!/usr/bin/env python3
"""Fashion-MNIST with elastic training: workers may die or join while it trains (docs/elastic.md).

    horarun -np 4 --min-np 2 -H a:2,b:2 python examples/pytorch/fashion_mnist_elastic.py
    horarun -np 2 --min-np 1 --host-discovery-script ./hosts.sh python examples/pytorch/fashion_mnist_elastic.py

The model, data and augmentation are fashion_mnist.py's; the elastic lines are marked "elastic:".
The state (model, optimizer, sampler, epoch) is committed every --commit-every batches: a
failure loses at most that much work, and the learning rate follows the number of workers.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import hora.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist as example  # noqa: E402  (data loading, models, augmentation)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=example.DATA)
    p.add_argument("--model", choices=["wrn", "cnn"], default="cnn")
    p.add_argument("--width", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--base-lr", type=float, default=0.01, help="one worker's; scaled by the number of workers")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--decay-epochs", type=int, default=0, help="the last N epochs train at a tenth of the rate")
    p.add_argument("--commit-every", type=int, default=20, help="batches between commits")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--train-limit", type=int, default=0, help="first N training images (0 = all)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-progress", action="store_true",
                   help="rank 0 logs each commit and the first step after each (re)start")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    train_set, test_set, prepare = example.datasets(args.data_dir, args.train_limit)

    model = example.wide_resnet(args.width) if args.model == "wrn" else example.small_cnn()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=args.momentum),
        named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=args.seed)  # elastic: re-shards on resets
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0, accuracy=0.0)  # elastic

    def set_learning_rate():  # elastic: it follows the number of workers
        decay = 0.1 if state.epoch >= args.epochs - args.decay_epochs else 1.0
        for group in optimizer.param_groups:
            group["lr"] = args.base_lr * hvd.size() * decay

    def on_reset():
        set_learning_rate()
        hvd.log(f"reset: {hvd.size()} workers now, from the last commit: epoch {state.epoch + 1} batch {state.batch}")

    state.register_reset_callbacks([on_reset])

    def evaluate():
        model.eval()
        loader = DataLoader(test_set, batch_size=500,
                            sampler=DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False))
        correct = count = 0
        with torch.no_grad():
            for x, y in loader:
                correct += (model(prepare(x)).argmax(1) == y).sum().item()
                count += y.shape[0]
        return hvd.average_metrics({"val_accuracy": correct / count})["val_accuracy"]

    def commit():
        if args.log_progress:
            hvd.log(f"commit: epoch {state.epoch + 1} batch {state.batch} | {hvd.size()} workers")
        state.commit()  # elastic: a failure goes back to here

    @hvd.elastic.run  # elastic: restore, re-form and go on after a failure or a host change
    def train(state):
        while state.epoch < args.epochs:
            set_learning_rate()
            model.train()
            start = time.time()
            loader = DataLoader(train_set, batch_size=args.batch_size, sampler=state.sampler)
            first = args.log_progress
            for x, y in loader:
                inputs = prepare(x) if args.no_augment else example.augment(prepare(x))
                optimizer.zero_grad()
                F.cross_entropy(model(inputs), y).backward()
                optimizer.step()
                if first:
                    hvd.log(f"first step: epoch {state.epoch + 1} batch {state.batch} | {hvd.size()} workers")
                    first = False
                state.sampler.record_batch(state.batch, args.batch_size)  # elastic: what this epoch has seen
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    commit()
            state.accuracy = evaluate()
            hvd.log(f"epoch {state.epoch + 1}: val_accuracy {state.accuracy:.4f} | {hvd.size()} workers | "
                    f"{time.time() - start:.1f} s")
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)  # elastic: at the end of the epoch
            commit()
        return state.accuracy

    accuracy = train(state)
    hvd.log(f"RESULT accuracy={accuracy:.4f} workers={hvd.size()}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
