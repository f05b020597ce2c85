"""Collectives on torch tensors through hora's engine: the names, arguments, defaults, return
values and errors of horovod.torch.mpi_ops. This module holds what every collective shares (the
handle table, names, argument checks, init and shutdown, poll and synchronize) and the allreduce
family; allgather and broadcast are in gather_ops.py, alltoall and reducescatter in
scatter_ops.py, and everything is importable from here as from horovod.torch.mpi_ops. (The
process's identity, capabilities and process sets are basics.py's; imported here too.)

Tensors cross to the engine as data pointers: a contiguous CPU tensor is reduced where it lies
(the in-place forms write into it, the others into a fresh tensor, without an extra copy).
Outputs whose shape only negotiation knows (allgather, alltoall, reducescatter) are allocated by
the engine and wrapped by torch without a copy. Async forms return an int handle for poll() and
synchronize(); every wait releases the GIL.
"""

import threading
import warnings

import torch

from hora import _core, _departure
from hora.torch.basics import _identity, add_process_set, forget_identity, global_process_set, note_compute_threads
# Horovod's mpi_ops has the basics too; scripts import them from there.
from hora.torch.basics import (ProcessSet, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,  # noqa: F401
                               gloo_built, gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size,
                               mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set,
                               rocm_built, size, start_timeline, stop_timeline)
from hora.torch.compression import Compression

# Reduce ops, as hvd.Average etc.
Average = _core.REDUCE_OPS["Average"]
Sum = _core.REDUCE_OPS["Sum"]
Min = _core.REDUCE_OPS["Min"]
Max = _core.REDUCE_OPS["Max"]
Product = _core.REDUCE_OPS["Product"]
# Horovod's Adasum (Note [adasum] in src/collectives/adasum.h): allreduce of floating-point
# tensors over every rank, their number a power of two.
Adasum = _core.REDUCE_OPS["Adasum"]

HoraInternalError = _core.HoraInternalError
HorovodInternalError = HoraInternalError  # scripts written for horovod.torch catch this name

# The dtypes every collective takes: horovod.torch's on the CPU, plus bfloat16, and uint8, int8
# and int16 in the reductions too (horovod.torch refuses those three there; hora reduces them,
# wrapping as integer sums do). No collective takes bool, as in horovod.torch, which raises
# ValueError for it; so does _check. (The core reduces every type of hora/types.h, bool
# included; the libtorch frontend takes them all.)
_DATA_TYPES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}


_lock = threading.Lock()
_handles = {}        # int -> _Pending
_next_handle = [0]
_name_counters = {}  # (op, process set id) -> next number of an unnamed tensor


def init(comm=None, process_sets=None):
    """Joins the job (started by horarun, mpirun or srun; a plain process is a job of one).
    process_sets: ProcessSet objects to register now, on every rank alike (their process_set_id
    is set), or "dynamic" (Horovod's switch for adding sets later, which hora always allows)."""
    if comm is not None:
        raise ValueError("hora does not take an MPI communicator; start the job with horarun or mpirun")
    _core.init()
    _departure.install()  # at exit, the other ranks learn why this one left
    note_compute_threads()
    forget_identity()
    global_process_set.ranks = list(range(_identity()["size"]))
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(f"process_sets must be a list of ProcessSet or 'dynamic', not {process_sets!r}")
        process_sets = []
    for i, ps in enumerate(process_sets or []):
        try:
            add_process_set(ps)
        except ValueError as e:
            raise ValueError(f"process_sets entry number {i} cannot be registered: {e}") from e


def shutdown():
    _core.shutdown("called shutdown()")
    forget_identity()
    with _lock:
        _handles.clear()
        _name_counters.clear()


class _Pending:
    """A collective in flight: the engine's handle, the tensors it reads and writes (kept alive
    until it completes) and how to produce the caller's result."""

    def __init__(self, handles, keep, finish):
        self.handles = handles
        self.keep = keep
        self.finish = finish


def _register(pending):
    with _lock:
        _next_handle[0] += 1
        _handles[_next_handle[0]] = pending
        return _next_handle[0]


def _auto_name(op, name, process_set):
    """`name`, or the next "op.noname.N" of this op in this process set. Counting per set keeps
    the names of the ranks in step when the members of different sets make different numbers
    of calls."""
    if name is not None:
        return name
    key = (op, process_set.process_set_id)
    with _lock:
        n = _name_counters.get(key, 0)
        _name_counters[key] = n + 1
    suffix = "" if key[1] == 0 else f".set{key[1]}"
    return f"{op}.noname.{n}{suffix}"


def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: hora runs on CPU tensors; got one on {tensor.device}")
    if tensor.dtype not in _DATA_TYPES:
        raise ValueError(f"{what}: Tensor type {tensor.type()} ({tensor.dtype}) is not supported; {what} takes "
                         + ", ".join(str(t) for t in _DATA_TYPES))


def _check_adasum(name, process_set):
    """What horovod.torch refuses before Adasum runs on CPU tensors, with its messages."""
    if process_set is not None and process_set.process_set_id not in (None, 0):
        raise NotImplementedError(f"{name}: Adasum does not support non-global process sets yet.")
    n = size()
    if n & (n - 1):
        raise NotImplementedError(f"{name}: Running Adasum with non-power of 2 ranks is not supported yet "
                                  f"(there are {n} ranks).")


def _resolve_op(op, average, name="allreduce", process_set=None):
    """Horovod's rules for the deprecated `average` argument, then the op's validity."""
    if op is not None and average is not None:
        raise ValueError(f"{name}: the op argument supersedes average; give only one of them")
    if average is not None:
        warnings.warn("the 'average' argument is deprecated; use op=hvd.Average or op=hvd.Sum", DeprecationWarning)
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        _check_adasum(name, process_set)
    if op not in _core.REDUCE_OPS.values():
        raise ValueError(f"{name}: unknown reduce op {op!r}")
    return op


def _check_registered(process_set):
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered (hvd.add_process_set)")


def _enqueue(tensor, output, name, op, *, reduce_op=0, prescale=1.0, postscale=1.0, root=0, splits=(),
             process_set=global_process_set):
    _check_registered(process_set)
    return _core.enqueue(name, op, _core.DATA_TYPES[_DATA_TYPES[tensor.dtype]], list(tensor.shape),
                         tensor.data_ptr(), output.data_ptr() if output is not None else 0,
                         reduce_op, float(prescale), float(postscale), int(root), [int(s) for s in splits],
                         process_set.process_set_id)


def _engine_output(handle, dtype):
    """The tensor the engine allocated for `handle`, without a copy."""
    shape = handle.output_shape()
    count = 1
    for d in shape:
        count *= d
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    raw = torch.from_numpy(handle.output())[:nbytes]
    return raw.view(dtype).reshape(shape)


# --- allreduce -------------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    _check(tensor, "allreduce")
    source = tensor if tensor.is_contiguous() else tensor.contiguous()
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    handle = _enqueue(source, target, _auto_name("allreduce", name, process_set), _core.ALLREDUCE,
                      reduce_op=op, prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)

    def finish():
        if target is not output:
            output.copy_(target)
        return output

    return _register(_Pending([handle], (tensor, source, output, target), finish))


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
    code = _DATA_TYPES.get(tensor.dtype)
    if code is None or not tensor.is_contiguous() or tensor.device.type != "cpu" or process_set.process_set_id is None:
        return _Synchronized(allreduce_async_(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor, process_set=process_set))
    ptr = tensor.data_ptr()
    return _core.enqueue(_auto_name("allreduce", name, process_set), _core.ALLREDUCE, _core.DATA_TYPES[code],
                         list(tensor.shape), ptr, ptr, op, float(prescale_factor), float(postscale_factor), 0, [],
                         process_set.process_set_id)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    op = _resolve_op(op, average, process_set=process_set)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    op = _resolve_op(op, average, process_set=process_set)
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
    op = _resolve_op(op, average, process_set=process_set)
    compressed, ctx = compression.compress(tensor)
    reduced = _AllreduceFunction.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _register_group(ids):
    """One handle for several: synchronize() returns the list of their outputs."""
    return _register(_Pending([], ids, lambda: _synchronize_all(ids)))


def _synchronize_all(ids):
    """Every handle's output, in order; all are waited for (and leave the table) even when one
    fails, and then the first failure is raised."""
    outputs, first_error = [], None
    for i in ids:
        try:
            outputs.append(synchronize(i))
        except Exception as e:  # noqa: BLE001 - re-raised below, after the others
            first_error = first_error or e
    if first_error is not None:
        raise first_error
    return outputs


def _grouped_allreduce_async(tensors, outputs, average, name, op, prescale_factor, postscale_factor, process_set):
    op = _resolve_op(op, average, process_set=process_set)
    base = _auto_name("grouped_allreduce", name, process_set)
    return _register_group([_allreduce_async(t, o, f"{base}.{i}", op, prescale_factor, postscale_factor, process_set)
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
    op = _resolve_op(op, average, "grouped_allreduce", process_set)
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedAllreduceFunction.apply(name, op, prescale_factor, postscale_factor, process_set,
                                              *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# --- completion ------------------------------------------------------------------------------

def poll(handle):
    """True when the operation behind `handle` has completed (then synchronize returns at once).
    ValueError for a handle that does not exist or was synchronized already, as Horovod."""
    with _lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"handle {handle} was not created or has been synchronized already")
    if not pending.handles:  # a group: done when all its members are
        return all(poll(i) for i in pending.keep)
    return all(h.poll() for h in pending.handles)


def synchronize(handle):
    """Waits for the operation behind `handle` (releasing the GIL) and returns its output (a
    tensor, a list of tensors for the grouped forms, (output, received_splits) for alltoall);
    raises HoraInternalError (a subclass naming the kind) when it failed. A handle that is not
    in flight (synchronized already) returns None, as in Horovod."""
    with _lock:
        pending = _handles.pop(handle, None)
    if pending is None:
        return None
    for h in pending.handles:
        h.wait()
    return pending.finish()


def join(device=-1):
    """Tells the other ranks this one has no more data; until all have joined, their allreduces
    go on with zeros from this rank (Average divides by every rank, as Horovod's does). Returns
    the last rank to join. (`device` is Horovod's GPU for the zeros; hora runs on CPU.)"""
    return _core.join(0)


def barrier(process_set=global_process_set):
    """Returns when every rank of `process_set` has called barrier()."""
    _core.barrier(process_set.process_set_id)


# The other families, so that `from hora.torch.mpi_ops import alltoall` works as with Horovod.
# (Imported last: they build on the plumbing above.)
from hora.torch.gather_ops import (allgather, allgather_async, broadcast, broadcast_, broadcast_async,  # noqa: E402
                                   broadcast_async_, grouped_allgather, grouped_allgather_async,
                                   sparse_allreduce_async)
from hora.torch.scatter_ops import (alltoall, alltoall_async, grouped_reducescatter,  # noqa: E402
                                    grouped_reducescatter_async, reducescatter, reducescatter_async)
