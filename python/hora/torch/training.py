"""Training helpers that the Horovod tutorials use with Keras callbacks, in PyTorch form: metric
averaging across ranks, learning-rate warm-up (Goyal et al., 2017) and schedules, and
rank-0-only logging and checkpointing."""

import os
import tempfile

import torch

from hora.common.basics import rank, size
from hora.common.ops import Average
from hora.torch.allreduce_ops import allreduce


def average_metrics(metrics, name="metrics"):
    """{name: number or tensor} -> the same names with values averaged over the ranks (the
    MetricAverageCallback): one allreduce for the whole dict."""
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    averaged = allreduce(values, op=Average, name=f"average_metrics.{name}")
    return {k: averaged[i].item() for i, k in enumerate(keys)}


class LearningRateWarmup:
    """Raises the learning rate gradually from base_lr to base_lr x size over warmup_epochs
    (LearningRateWarmupCallback): large effective batches train badly if they start at the full
    scaled rate. Call step(epoch, batch) before each optimizer step; epoch may be fractional."""

    def __init__(self, optimizer, base_lr, warmup_epochs, steps_per_epoch, scale=None):
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.scale = size() if scale is None else scale

    def lr_at(self, epoch, batch=0):
        progress = epoch + batch / self.steps_per_epoch
        if self.warmup_epochs <= 0 or progress >= self.warmup_epochs:
            return self.base_lr * self.scale
        return self.base_lr * (1 + (self.scale - 1) * progress / self.warmup_epochs)

    def step(self, epoch, batch=0):
        lr = self.lr_at(epoch, batch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr


class LearningRateSchedule:
    """lr = initial_lr x multiplier(epoch) for start_epoch <= epoch < end_epoch
    (LearningRateScheduleCallback); multiplier is a number or a function of the epoch."""

    def __init__(self, optimizer, initial_lr, multiplier, start_epoch=0, end_epoch=None):
        self.optimizer = optimizer
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch, self.end_epoch = start_epoch, end_epoch

    def step(self, epoch):
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return None
        lr = self.initial_lr * self.multiplier(epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr


def is_root():
    return rank() == 0


def log(*args, **kwargs):
    """print() on rank 0 only."""
    if rank() == 0:
        print(*args, **kwargs, flush=True)


def save_checkpoint(state, path):
    """torch.save(state, path) on rank 0, atomically: a crash never leaves half a file behind."""
    if rank() != 0:
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
