"""Collectives on torch tensors through hora's engine: the names, arguments and semantics of
horovod.torch.mpi_ops. (The process's identity, capabilities and process sets are basics.py's;
they are imported here too, as horovod.torch.mpi_ops has them.)

Tensors cross to the engine as data pointers: a contiguous CPU tensor is reduced where it lies
(the in-place forms write into it, the others into a fresh tensor, without an extra copy).
Outputs whose shape only negotiation knows (allgather, alltoall, reducescatter) are allocated by
the engine and wrapped by torch without a copy. Async forms return an int handle for poll() and
synchronize(); every wait releases the GIL.
"""

import threading
import warnings

import torch

from hora import _core
from hora.torch.basics import _identity, add_process_set, forget_identity, global_process_set, note_compute_threads

# Reduce ops, as hvd.Average etc.
Average = _core.REDUCE_OPS["Average"]
Sum = _core.REDUCE_OPS["Sum"]
Min = _core.REDUCE_OPS["Min"]
Max = _core.REDUCE_OPS["Max"]
Product = _core.REDUCE_OPS["Product"]
Adasum = -1  # not supported; named so that `op=hvd.Adasum` fails with a clear message

HoraInternalError = _core.HoraInternalError
HorovodInternalError = HoraInternalError  # scripts written for horovod.torch catch this name

_DATA_TYPES = {
    torch.uint8: "uint8", torch.int8: "int8", torch.int32: "int32", torch.int64: "int64",
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}


_lock = threading.Lock()
_handles = {}        # int -> _Pending
_next_handle = [0]
_name_counters = {}  # op -> next number of an unnamed tensor


def init(comm=None, process_sets=None):
    """Joins the job (started by horarun, mpirun or srun; a plain process is a job of one).
    process_sets: ProcessSet objects (or rank lists) to register now, on every rank alike."""
    if comm is not None:
        raise ValueError("hora does not take an MPI communicator; start the job with horarun or mpirun")
    _core.init()
    note_compute_threads()
    forget_identity()
    global_process_set.ranks = list(range(_identity()["size"]))
    added = []
    for ps in process_sets or []:
        added.append(add_process_set(ps))
    return added


def shutdown():
    _core.shutdown()
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


def _auto_name(op, name):
    if name is not None:
        return name
    with _lock:
        n = _name_counters.get(op, 0)
        _name_counters[op] = n + 1
    return f"{op}.noname.{n}"


def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{what}: hora runs on CPU tensors; got one on {tensor.device}")
    if tensor.dtype not in _DATA_TYPES:
        raise ValueError(f"{what}: dtype {tensor.dtype} is not supported; use one of "
                         + ", ".join(str(t) for t in _DATA_TYPES))


def _resolve_op(op, average, name="allreduce"):
    if average is not None:
        warnings.warn("the 'average' argument is deprecated; use op=hvd.Average or op=hvd.Sum", DeprecationWarning)
        if op is not None:
            raise ValueError(f"{name}: give 'op' or 'average', not both")
        return Average if average else Sum
    if op is None:
        return Average
    if op is Adasum:
        raise ValueError("Adasum is not supported by hora")
    if op not in _core.REDUCE_OPS.values():
        raise ValueError(f"{name}: unknown reduce op {op!r}")
    return op


def _enqueue(tensor, output, name, op, *, reduce_op=0, prescale=1.0, postscale=1.0, root=0, splits=(),
             process_set=global_process_set):
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered (hvd.add_process_set)")
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
    handle = _enqueue(source, target, _auto_name("allreduce", name), _core.ALLREDUCE, reduce_op=op,
                      prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)

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
    return _core.enqueue(_auto_name("allreduce", name), _core.ALLREDUCE, _core.DATA_TYPES[code], list(tensor.shape),
                         ptr, ptr, op, float(prescale_factor), float(postscale_factor), 0, [],
                         process_set.process_set_id)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    op = _resolve_op(op, average)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)


class _AllreduceFunction(torch.autograd.Function):
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


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over the ranks (default op: Average), as a new tensor; autograd
    flows through it (the gradient is reduced the same way)."""
    from hora.torch.compression import Compression
    compression = compression or Compression.none
    op = _resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _AllreduceFunction.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    base = _auto_name("grouped_allreduce", name)
    ids = [allreduce_async(t, name=f"{base}.{i}", op=op, prescale_factor=prescale_factor,
                           postscale_factor=postscale_factor, process_set=process_set) for i, t in enumerate(tensors)]
    return _register(_Pending([], ids, lambda: [synchronize(i) for i in ids]))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    base = _auto_name("grouped_allreduce", name)
    ids = [allreduce_async_(t, name=f"{base}.{i}", op=op, prescale_factor=prescale_factor,
                            postscale_factor=postscale_factor, process_set=process_set) for i, t in enumerate(tensors)]
    return _register(_Pending([], ids, lambda: [synchronize(i) for i in ids]))


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    from hora.torch.compression import Compression
    compression = compression or Compression.none
    compressed = [compression.compress(t) for t in tensors]
    outputs = synchronize(grouped_allreduce_async([c for c, _ in compressed], average, name, op,
                                                  prescale_factor, postscale_factor, process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# --- allgather -------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    _check(tensor, "allgather")
    source = tensor.contiguous()
    handle = _enqueue(source, None, _auto_name("allgather", name), _core.ALLGATHER, process_set=process_set)
    return _register(_Pending([handle], (tensor, source), lambda: _engine_output(handle, tensor.dtype)))


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        rows = synchronize(allgather_async(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ctx.process_set))
        offset = int(rows[:ctx.process_set.rank()].sum())
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation over ranks of `tensor` along dimension 0 (which may differ by rank)."""
    return _AllgatherFunction.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    base = _auto_name("grouped_allgather", name)
    ids = [allgather_async(t, name=f"{base}.{i}", process_set=process_set) for i, t in enumerate(tensors)]
    return _register(_Pending([], ids, lambda: [synchronize(i) for i in ids]))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# --- broadcast -------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set):
    _check(tensor, "broadcast")
    source = tensor if tensor.is_contiguous() else tensor.contiguous()
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    handle = _enqueue(source, target, _auto_name("broadcast", name), _core.BROADCAST, root=root_rank,
                      process_set=process_set)

    def finish():
        if target is not output:
            output.copy_(target)
        return output

    return _register(_Pending([handle], (tensor, source, output, target), finish))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), root_rank,
                            name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if ctx.process_set.rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """`tensor` as rank `root_rank` holds it, on every rank (a new tensor)."""
    return _BroadcastFunction.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall, reducescatter -----------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _check(tensor, "alltoall")
    source = tensor.contiguous()
    split_list = [] if splits is None else [int(s) for s in (splits.tolist() if torch.is_tensor(splits) else splits)]
    handle = _enqueue(source, None, _auto_name("alltoall", name), _core.ALLTOALL, splits=split_list,
                      process_set=process_set)
    return _register(_Pending([handle], (tensor, source), lambda: _engine_output(handle, tensor.dtype)))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rank r sends rows splits[d] (even split when None) to each rank d, and receives what each
    rank sends it, concatenated in rank order along dimension 0."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    _check(tensor, "reducescatter")
    op = _resolve_op(op, None, "reducescatter")
    source = tensor.contiguous()
    handle = _enqueue(source, None, _auto_name("reducescatter", name), _core.REDUCESCATTER, reduce_op=op,
                      prescale=prescale_factor, postscale=postscale_factor, process_set=process_set)
    return _register(_Pending([handle], (tensor, source), lambda: _engine_output(handle, tensor.dtype)))


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """The reduction over ranks of `tensor`, of which each rank keeps its block of rows
    (dimension 0 split as evenly as possible, earlier ranks taking the remainder)."""
    from hora.torch.compression import Compression
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


# --- completion ------------------------------------------------------------------------------

def poll(handle):
    """True when the operation behind `handle` has completed (then synchronize returns at once)."""
    with _lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    if not pending.handles:  # a group: done when all its members are
        return all(poll(i) for i in pending.keep)
    return all(h.poll() for h in pending.handles)


def synchronize(handle):
    """Waits for the operation behind `handle` (releasing the GIL) and returns its output;
    raises HoraInternalError (a subclass naming the kind) when it failed."""
    with _lock:
        pending = _handles.pop(handle, None)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    for h in pending.handles:
        h.wait()
    return pending.finish()


def join(device=-1):
    """Tells the other ranks this one has no more data; until all have joined, their allreduces
    go on with zeros from this rank (Average counts only the ranks that contributed). Returns
    the last rank to join."""
    return _core.join(0)


def barrier(process_set=global_process_set):
    _core.barrier(process_set.process_set_id)
