#!/usr/bin/env python3
"""Fashion-MNIST on N workers with hora.torch: the Horovod tutorial's WideResNet training,
in PyTorch.

    horarun -np 2 python examples/pytorch/fashion_mnist.py            # the main job (scripts/demo.sh)
    horarun -np 2 python examples/pytorch/fashion_mnist.py --width 10 # the tutorial's WRN-16-10

The hora lines are marked "hora:"; without them this is a single-process script.
"""

import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hora.torch as hvd

DATA = "/usr/share/datasets/fashion-mnist"


def parse_args():
    p = argparse.ArgumentParser(description="Fashion-MNIST with hora", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data-dir", default=DATA, help="the IDX .gz files (Debian: dataset-fashion-mnist)")
    p.add_argument("--model", choices=["wrn", "cnn"], default="wrn", help="the tutorial's WideResNet, or a small CNN")
    p.add_argument("--width", type=int, default=1, help="WideResNet width k (channels 16k, 32k, 64k); 10 = WRN-16-10")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per worker")
    p.add_argument("--val-batch-size", type=int, default=256, help="validation batch size per worker")
    p.add_argument("--epochs", type=int, default=40, help="most epochs to train")
    p.add_argument("--base-lr", type=float, default=0.01, help="learning rate of one worker (scaled by the worker count)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=0.000005, help="weight decay")
    p.add_argument("--warmup-epochs", type=float, default=1.0, help="epochs to ramp lr from base-lr to base-lr x size")
    p.add_argument("--target-accuracy", type=float, default=0.85, help="stop when validation accuracy exceeds this")
    p.add_argument("--patience", type=int, default=2, help="epochs at the target before stopping")
    p.add_argument("--no-augment", action="store_true", help="train without the random flips and shifts")
    p.add_argument("--train-limit", type=int, default=0, help="use only the first N training images (0 = all)")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to float16 for the allreduce")
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: cores / local workers)")
    p.add_argument("--checkpoint", default="checkpoints/fashion_mnist.pt", help="written by rank 0 after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--timeline", default="", help="write hora's timeline (Chrome trace) to this file")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args()


def read_idx(path):
    """An IDX file (the MNIST format), gzipped: big-endian magic, dimensions, then uint8 data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape).copy())


def load(data_dir):
    x_train = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz"))
    y_train = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")).long()
    x_test = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"))
    y_test = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).long()
    return x_train, y_train, x_test, y_test


def datasets(data_dir, train_limit=0):
    """The training set (its first train_limit images when given), the test set, and `prepare`,
    which turns a batch of uint8 images into normalized (N, 1, 28, 28) floats (featurewise
    normalization with the training set's mean and deviation)."""
    x_train, y_train, x_test, y_test = load(data_dir)
    if train_limit:
        x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    mean, std = x_train.float().mean() / 255, x_train.float().std() / 255
    prepare = lambda x: ((x.float() / 255 - mean) / std).unsqueeze(1)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test), prepare


def augment(x):
    """The tutorial's ImageDataGenerator: random horizontal flips and shifts of up to 20% of
    the width and height (zero fill), on a batch of (N, 1, 28, 28) images."""
    n = x.shape[0]
    flip = torch.rand(n) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    pad = 6  # 20% of 28, rounded up
    padded = F.pad(x, (pad, pad, pad, pad))
    # One gather for the whole batch: image i's window starts at (dy[i], dx[i]) of its padding.
    rows = torch.randint(0, 2 * pad + 1, (n, 1)) + torch.arange(28)
    cols = torch.randint(0, 2 * pad + 1, (n, 1)) + torch.arange(28)
    return padded[torch.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]].unsqueeze(1)


def cbr(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ConvBlock(nn.Module):
    """The tutorial's residual block: conv-bn-relu, dropout 0.01, conv-bn-relu, plus the input
    (through a 1x1 convolution where the width changes)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.body = nn.Sequential(cbr(cin, cout), nn.Dropout(0.01), cbr(cout, cout))

    def forward(self, x):
        return self.shortcut(x) + self.body(x)


def wide_resnet(width, classes=10):
    """WideResNet-16-k as the tutorial builds it (after keras_contrib)."""
    c = [16 * width, 32 * width, 64 * width]
    return nn.Sequential(
        cbr(1, 16),
        ConvBlock(16, c[0]), ConvBlock(c[0], c[0]), nn.MaxPool2d(2),
        ConvBlock(c[0], c[1]), ConvBlock(c[1], c[1]), nn.MaxPool2d(2),
        ConvBlock(c[1], c[2]), ConvBlock(c[2], c[2]),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c[2], classes))


def small_cnn(classes=10):
    """2 convolutions + 2 fully connected layers (434,041 parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 12 * 12, 45), nn.ReLU(), nn.Linear(45, classes))


def tutorial_schedule(epoch):
    """The tutorial's step decay, as a multiplier of the (scaled) learning rate."""
    return 1.0 if epoch < 15 else 1e-1 if epoch < 25 else 1e-2 if epoch < 35 else 1e-3


def main():
    args = parse_args()
    hvd.init()                                                     # hora: join the job
    torch.manual_seed(args.seed)
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())  # hora: share the host
    torch.set_num_threads(threads)
    verbose = hvd.rank() == 0                                      # hora: log on rank 0 only
    if args.timeline:
        hvd.start_timeline(args.timeline)

    train_set, test_set, prepare = datasets(args.data_dir, args.train_limit)
    # hora: each worker reads its own shard of the data.
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=args.seed)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_loader = DataLoader(test_set, batch_size=args.val_batch_size, sampler=test_sampler)

    model = wide_resnet(args.width) if args.model == "wrn" else small_cnn()
    # hora: scale the learning rate by the number of workers (warmed up below).
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr * hvd.size(), momentum=args.momentum,
                                weight_decay=args.wd)
    start_epoch, met_target, total_time = 0, 0, 0.0
    if args.resume and os.path.exists(args.checkpoint):
        if verbose:
            checkpoint = torch.load(args.checkpoint)
        else:
            checkpoint = None
        checkpoint = hvd.broadcast_object(checkpoint, root_rank=0)  # hora: rank 0 read it
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch, met_target, total_time = checkpoint["epoch"] + 1, checkpoint["met_target"], checkpoint["time"]
        hvd.log(f"resumed from {args.checkpoint} after epoch {start_epoch}")
    # hora: average gradients across workers, overlapping the allreduce with the backward pass.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none)
    # hora: start every worker from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    warmup = hvd.LearningRateWarmup(optimizer, args.base_lr, args.warmup_epochs, len(train_loader))

    if verbose:
        params = sum(p.numel() for p in model.parameters())
        print(f"{args.model}{'-16-' + str(args.width) if args.model == 'wrn' else ''}: {params:,} parameters; "
              f"{hvd.size()} workers x {threads} threads; batch {args.batch_size} per worker "
              f"({args.batch_size * hvd.size()} global); {len(train_set)} training images", flush=True)
    progress = None
    if verbose and not args.no_progress:
        try:
            from tqdm import tqdm
            progress = tqdm
        except ImportError:
            progress = None

    accuracy, reached_at = 0.0, None
    for epoch in range(start_epoch, args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)
        epoch_start = time.time()
        batches = enumerate(train_loader)
        if progress:
            batches = progress(batches, total=len(train_loader), desc=f"epoch {epoch + 1}", leave=False)
        train_loss, seen = 0.0, 0
        for i, (x, y) in batches:
            if epoch < args.warmup_epochs:
                warmup.step(epoch, i)
            else:
                for group in optimizer.param_groups:
                    group["lr"] = args.base_lr * hvd.size() * tutorial_schedule(epoch)
            optimizer.zero_grad()
            inputs = prepare(x) if args.no_augment else augment(prepare(x))
            loss = F.cross_entropy(model(inputs), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item() * x.shape[0]
            seen += x.shape[0]
        epoch_time = time.time() - epoch_start
        total_time += epoch_time

        model.eval()
        correct, count, val_loss = 0, 0, 0.0
        with torch.no_grad():
            for x, y in test_loader:
                out = model(prepare(x))
                val_loss += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
                count += y.shape[0]
        # hora: average the metrics over the workers (each saw its shard of the test set).
        metrics = hvd.average_metrics({"loss": train_loss / seen, "val_loss": val_loss / count,
                                       "val_accuracy": correct / count})
        accuracy = metrics["val_accuracy"]
        images_per_sec = seen * hvd.size() / epoch_time
        hvd.log(f"epoch {epoch + 1}: loss {metrics['loss']:.4f} val_loss {metrics['val_loss']:.4f} "
                f"val_accuracy {accuracy:.4f} | {images_per_sec:.1f} images/sec | epoch {epoch_time:.1f} s, "
                f"cumulative {total_time:.1f} s")
        met_target = met_target + 1 if accuracy > args.target_accuracy else 0
        if accuracy > args.target_accuracy and reached_at is None:
            reached_at = total_time
        hvd.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                             "met_target": met_target, "time": total_time}, args.checkpoint)  # hora: rank 0 writes
        if met_target >= args.patience:
            hvd.log(f"early stopping after epoch {epoch + 1}: validation accuracy above {args.target_accuracy} "
                    f"for {args.patience} epochs")
            break

    if args.timeline:
        hvd.stop_timeline()
    if verbose:
        print(f"RESULT accuracy={accuracy:.4f} target={args.target_accuracy} "
              f"reached={'yes' if accuracy > args.target_accuracy else 'no'} "
              f"time_to_target_s={reached_at if reached_at is not None else float('nan'):.1f} "
              f"train_time_s={total_time:.1f} checkpoint={os.path.abspath(args.checkpoint)}"
              + (f" timeline={os.path.abspath(args.timeline)}" if args.timeline else ""), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
