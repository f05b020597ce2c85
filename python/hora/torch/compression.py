"""Gradient compression for allreduce (horovod.torch.compression)."""

import torch

from hora.common.compression import Compressor, NoneCompressor  # noqa: F401  (horovod.*.compression has them)


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes); the sum is taken in float32 by
    hora's reduction kernels, so only the inputs and the result are rounded."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
