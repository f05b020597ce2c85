"""Collectives on plain values (numbers, lists, numpy arrays) for Keras users: each wraps the
value in a tf.constant and returns the result as an eager tensor (Horovod's hvd.allreduce etc.
of horovod.tensorflow.keras and horovod.keras)."""

import tensorflow as tf

import hora.tensorflow as hvd


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=hvd.Compression.none):
    """Reduces `value` (a number, list or array: anything tf.constant takes, of the same
    shape on every rank) across the ranks and returns the result as a tensor.

    Arguments: `name` names the collective (the same on every rank); `op` is Average (the
    default), Sum, Min, Max or Product (`average=True/False` is the deprecated spelling of
    Average/Sum); `prescale_factor` and `postscale_factor` multiply the value before and the
    result after the reduction; `compression` is Compression.none or Compression.fp16.
    """
    return hvd.allreduce(tf.constant(value, name=name), average=average, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, op=op, compression=compression, name=name)


def allgather(value, name=None):
    """Concatenates every rank's `value` along the first dimension, in rank order; the first
    dimension may differ between ranks, the others may not. `name` names the collective."""
    return hvd.allgather(tf.constant(value, name=name), name=name)


def broadcast(value, root_rank, name=None):
    """Returns rank `root_rank`'s `value` on every rank (each rank passes a value of the same
    shape). `name` names the collective."""
    return hvd.broadcast(tf.constant(value, name=name), root_rank, name=name)


def reducescatter(value, name=None, op=hvd.Average):
    """Reduces `value` (of the same shape on every rank) across the ranks with `op` (Average by
    default, or Sum) and returns this rank's share of the result: a slice of the first
    dimension, as even as the ranks allow. `name` names the collective."""
    return hvd.reducescatter(tf.constant(value, name=name), op=op, name=name)


def broadcast_global_variables(root_rank):
    """TensorFlow 1 graphs only: an op that sets every global variable to rank `root_rank`'s
    value (eagerly, use BroadcastGlobalVariablesCallback or hvd.broadcast_variables)."""
    return hvd.broadcast_global_variables(root_rank)
