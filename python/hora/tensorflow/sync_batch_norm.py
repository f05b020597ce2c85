"""SyncBatchNormalization (horovod.tensorflow.SyncBatchNormalization): batch normalization whose
batch statistics, while training, are those of the global batch: every process's mean and mean
of squares averaged across the processes (Var[X] = E[X^2] - E[X]^2).

It overrides BatchNormalization._moments, whose signature differs between Keras 2
(inputs, reduction_axes, keep_dims, mask=None) and Keras 3 (inputs, mask); both are served."""

import tensorflow as tf

from hora.tensorflow.mpi_ops import Sum, _allreduce, size


def _global_moments(mean, variance):
    """(mean, variance) of the global batch from this process's, every batch of equal size."""
    n = size()
    if n == 1:
        return mean, variance
    stacked = tf.stack([mean, variance + tf.math.square(mean)])
    group_mean, group_mean_of_square = tf.unstack(_allreduce(stacked, op=Sum) / n)
    return group_mean, group_mean_of_square - tf.math.square(group_mean)


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """Synchronous batch normalization: statistics synchronized across all workers in training."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        if "fused" in tf.keras.layers.BatchNormalization.__init__.__code__.co_varnames:  # Keras 2
            kwargs["fused"] = fused
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        mean, variance = super()._moments(inputs, *args, **kwargs)
        return _global_moments(mean, variance)
