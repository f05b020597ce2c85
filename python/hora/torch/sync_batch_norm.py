"""SyncBatchNorm: batch normalization whose statistics cover the batch of every rank."""

import torch

from hora.common.basics import size
from hora.common.ops import Sum
from hora.common.process_sets import global_process_set
from hora.torch.allreduce_ops import allreduce


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Drop-in for torch.nn.BatchNorm*d (horovod.torch.SyncBatchNorm). In training, the mean and
    variance are those of the union of all ranks' batches: one allreduce of (sum, sum of
    squares, count) per call. The allreduce is differentiable (its gradient is the allreduce of
    the gradients), so the backward pass is exact without a hand-written formula."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training or self.process_set.size() == 1 or size() == 1:
            return super().forward(x)
        c = x.size(1)
        dims = [0] + list(range(2, x.dim()))
        count = torch.tensor([x.numel() / c], dtype=x.dtype)
        local = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = allreduce(local, op=Sum, process_set=self.process_set)
        n = total[-1]
        mean = total[:c] / n
        var = total[c:2 * c] / n - mean * mean
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - momentum).add_(momentum * mean)
                self.running_var.mul_(1 - momentum).add_(momentum * unbiased)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x - mean.reshape(shape)) * torch.rsqrt(var.reshape(shape) + self.eps)
        if self.affine:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        return y


__all__ = ["SyncBatchNorm"]
