"""Gradient compression (horovod.tensorflow.compression): Compression.none and Compression.fp16,
which casts floating-point tensors to float16 for the collective and back afterwards."""

import tensorflow as tf


class Compressor:
    """compress(tensor) -> (tensor, context); decompress(tensor, context) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError()

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError()


class NoneCompressor(Compressor):
    """No compression (the default)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


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
