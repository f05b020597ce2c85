"""Gradient compression (horovod.tensorflow.compression): Compression.none and Compression.fp16,
which casts floating-point tensors to float16 for the collective and back afterwards."""

import tensorflow as tf

from hora.common.compression import Compressor, NoneCompressor  # noqa: F401  (horovod.*.compression has them)


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; others unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating:
            return tf.cast(tensor, dtype=tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx.is_floating:
            return tf.cast(tensor, dtype=ctx)
        return tensor


class Compression:
    """Optional gradient compression for allreduce and reducescatter."""

    none = NoneCompressor  # do not compress (the default)
    fp16 = FP16Compressor  # compress floating-point tensors to 16 bits
