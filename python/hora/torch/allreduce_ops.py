"""allreduce and its grouped forms on torch tensors (horovod.torch.mpi_ops's names; imported
from there too). The synchronous out-of-place forms are autograd Functions whose gradient is
Horovod's: the same reduction (op, scales, set) of the output gradients."""

import torch

from hora.common.handles import register_group, synchronize
from hora.common.ops import resolve_op
from hora.common.process_sets import global_process_set
from hora.common.requests import ALLREDUCE, auto_name
from hora.common.requests import enqueue as enqueue_buffers
from hora.torch.buffers import DATA_TYPES, check, register_into
from hora.torch.compression import Compression


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    check(tensor, "allreduce")
    return register_into(tensor, output, auto_name("allreduce", name, process_set), ALLREDUCE, reduce_op=op,
                         prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)


class _Synchronized:
    """The result of allreduce_async_ in the form the engine's own handles have: wait()."""

    def __init__(self, handle):
        self.handle = handle

    def wait(self):
        synchronize(self.handle)


def _gradient_allreduce_async_(tensor, name, op, prescale_factor, postscale_factor, process_set):
    """allreduce_async_ for DistributedOptimizer's hooks, which run for every gradient of every
    step: a contiguous CPU tensor goes to the engine without the public API's checks and handle
    table, and the engine's handle comes back (its wait() reduces in place). Anything else takes
    the public path."""
    dtype = DATA_TYPES.get(tensor.dtype)
    if dtype is None or not tensor.is_contiguous() or tensor.device.type != "cpu" or process_set.process_set_id is None:
        return _Synchronized(allreduce_async_(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor, process_set=process_set))
    ptr = tensor.data_ptr()
    return enqueue_buffers(auto_name("allreduce", name, process_set), ALLREDUCE, dtype, tensor.shape, ptr, ptr,
                           reduce_op=op, prescale=prescale_factor, postscale=postscale_factor,
                           process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    op = resolve_op(op, average, process_set=process_set)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    op = resolve_op(op, average, process_set=process_set)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


class _AllreduceFunction(torch.autograd.Function):
    """Horovod's HorovodAllreduce: the gradient is the same reduction (op, scales, set) of the
    output gradients."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, ps = ctx.args
        grad = allreduce(grad_output, op=op, prescale_factor=pre, postscale_factor=post, process_set=ps)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over the ranks (default op: Average), as a new tensor; autograd
    flows through it (the gradient is reduced the same way)."""
    op = resolve_op(op, average, process_set=process_set)
    compressed, ctx = compression.compress(tensor)
    reduced = _AllreduceFunction.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, average, name, op, prescale_factor, postscale_factor, process_set):
    op = resolve_op(op, average, process_set=process_set)
    base = auto_name("grouped_allreduce", name, process_set)
    return register_group([_allreduce_async(t, o, f"{base}.{i}", op, prescale_factor, postscale_factor, process_set)
                           for i, (t, o) in enumerate(zip(tensors, outputs))])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, average, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, tensors, average, name, op, prescale_factor, postscale_factor,
                                    process_set)


class _GroupedAllreduceFunction(torch.autograd.Function):
    """Horovod's HorovodGroupedAllreduce: each gradient is reduced as its tensor was."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor,
                                                         process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, pre, post, ps = ctx.args
        grads = grouped_allreduce(list(grad_outputs), op=op, prescale_factor=pre, postscale_factor=post,
                                  process_set=ps)
        return (None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """allreduce of each tensor of the list, negotiated together; autograd flows through it."""
    op = resolve_op(op, average, "grouped_allreduce", process_set)
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedAllreduceFunction.apply(name, op, prescale_factor, postscale_factor, process_set,
                                              *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))
