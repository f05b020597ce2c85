"""The public reductions of horovod.tensorflow (allreduce, grouped_allreduce, reducescatter,
grouped_reducescatter): compression, the deprecated average=, and tf.IndexedSlices (reduced as
two allgathers, of the values and of the indices) around the ops of mpi_ops.py."""

import tensorflow as tf

from hora.common.elastic import is_elastic_job
from hora.common.ops import resolve_op, resolve_reducescatter_op
from hora.common.process_sets import global_process_set, require_registered
from hora.tensorflow.compression import Compression
from hora.tensorflow.mpi_ops import (Average, Sum, _allreduce, _grouped_allreduce, _grouped_reducescatter,
                                     _reducescatter, grouped_allgather, size_op)
from hora.tensorflow.mpi_ops import allgather as _allgather


def _set_size(process_set, dtype):
    """The set's size as a tensor of dtype; read when the graph runs in an elastic job, whose
    size changes while a traced function lives on."""
    n = size_op(process_set_id=process_set.process_set_id) if is_elastic_job() else process_set.size()
    return tf.cast(n, dtype=dtype)


def _check_sparse(op, prescale_factor, postscale_factor):
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces a tf.Tensor, tf.Variable or tf.IndexedSlices over the processes of the set (op
    defaults to Average). The shape must agree on every rank. An IndexedSlices is reduced by
    allgathering its values and indices (Sum and Average only).

    device_dense / device_sparse: where the reduction's surrounding ops run (hora reduces on the
    CPU). compression: e.g. Compression.fp16 for the collective. Returns a tensor of the same
    shape and type (an IndexedSlices for an IndexedSlices)."""
    op = resolve_op(op, average, "allreduce", process_set)
    require_registered(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = _allgather(tensor.values, process_set=process_set, ignore_name_scope=ignore_name_scope)
            indices = _allgather(tensor.indices, process_set=process_set, ignore_name_scope=ignore_name_scope)
            if op == Average:
                values = values / _set_size(process_set, values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _allreduce(compressed, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             name=name, process_set=process_set, ignore_name_scope=ignore_name_scope)
        return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of every tensor of a sequence at once (dense tensors of one type in one op,
    IndexedSlices as grouped allgathers); returns a list in the same order."""
    if not tensors:
        return tensors
    op = resolve_op(op, average, "grouped_allreduce", process_set)
    require_registered(process_set)
    results = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = grouped_allgather([tensors[i].values for i in sparse], process_set=process_set,
                                       ignore_name_scope=ignore_name_scope)
            indices = grouped_allgather([tensors[i].indices for i in sparse], process_set=process_set,
                                        ignore_name_scope=ignore_name_scope)
            for i, v, x in zip(sparse, values, indices):
                if op == Average:
                    v = v / _set_size(process_set, v.dtype)
                results[i] = tf.IndexedSlices(v, x, dense_shape=tensors[i].dense_shape)
    if dense:
        with tf.device(device_dense):
            compressed, ctxs = zip(*[compression.compress(tensors[i]) for i in dense])
            reduced = _grouped_allreduce(list(compressed), op=op, prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor, process_set=process_set, name=name,
                                         ignore_name_scope=ignore_name_scope)
            for i, r, ctx in zip(dense, reduced, ctxs):
                results[i] = compression.decompress(r, ctx)
    return results


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this process's block of dimension 0 (op
    defaults to Average)."""
    op = resolve_reducescatter_op(op)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _reducescatter(compressed, op=op, name=name, process_set=process_set,
                                 ignore_name_scope=ignore_name_scope, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)
        return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of every tensor of a sequence (of one type) in one op."""
    if not tensors:
        return tensors
    op = resolve_reducescatter_op(op)
    with tf.device(device_dense):
        compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
        reduced = _grouped_reducescatter(list(compressed), op=op, process_set=process_set,
                                         prescale_factor=prescale_factor, postscale_factor=postscale_factor)
        return [compression.decompress(r, ctx) for r, ctx in zip(reduced, ctxs)]
