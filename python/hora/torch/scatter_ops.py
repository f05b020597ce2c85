"""alltoall and reducescatter: collectives whose output is each rank's own part
(horovod.torch.mpi_ops's names; imported from there too).

Argument errors that Horovod detects on the calling rank (splits of the wrong type or length,
an op reducescatter cannot do) are raised here, before anything is enqueued, with Horovod's
exception types; errors that need the other ranks' arguments come from the engine's
negotiation, on every rank."""

import torch

from hora.common.exceptions import HoraInternalError
from hora.common.handles import Pending, register, register_group, synchronize
from hora.common.ops import Adasum, Average, Sum, resolve_reducescatter_op  # noqa: F401  (Adasum: as it was)
from hora.common.process_sets import global_process_set, require_registered
from hora.common.requests import ALLTOALL, REDUCESCATTER, alltoall_counts, auto_name
from hora.torch.buffers import check, engine_output, enqueue
from hora.torch.compression import Compression
from hora.torch.gather_ops import allgather, grouped_allgather

# --- alltoall --------------------------------------------------------------------------------


def _rows_to_send(tensor, splits, members):
    """Rows of dimension 0 for each member of the set (requests.alltoall_counts), with the
    checks of a tensor of splits, as Horovod's."""
    if tensor.dim() == 0:
        raise ValueError("alltoall: a tensor with at least one dimension is required")
    if torch.is_tensor(splits):
        if splits.dim() > 1:
            raise ValueError("alltoall: splits must be a 1-D tensor")
        if splits.dtype != torch.int32:
            raise ValueError(f"alltoall: splits must hold 32-bit integers (torch.int32), not {splits.dtype}")
        splits = splits.tolist()
    return alltoall_counts(tensor.shape[0], splits, members)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize() returns (output, received_splits) as in Horovod, where
    received_splits[s] is how many rows came from member s (an int32 tensor)."""
    check(tensor, "alltoall")
    require_registered(process_set)
    counts = _rows_to_send(tensor, splits, process_set.size())
    sent = tensor.narrow(0, 0, sum(counts)).contiguous()
    name = auto_name("alltoall", name, process_set)
    data = enqueue(sent, None, name, ALLTOALL, splits=counts, process_set=process_set)
    # The engine returns only the data; each member's count for this rank comes from a second,
    # tiny alltoall negotiated in the same cycle.
    mine = torch.tensor(counts, dtype=torch.int32)
    received = enqueue(mine, None, f"{name}.received_splits", ALLTOALL, splits=[1] * len(counts),
                       process_set=process_set)

    def finish():
        return engine_output(data, tensor.dtype), engine_output(received, torch.int32).clone()

    return register(Pending([data, received], (tensor, sent, mine), finish))


class _AlltoallFunction(torch.autograd.Function):
    """Horovod's HorovodAlltoall: the gradient goes back where the rows came from (an alltoall
    with the received splits); received_splits is not differentiable."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set, ctx.rows = received, process_set, tensor.shape[0]
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = alltoall(grad_output, splits=ctx.received, process_set=ctx.process_set)
        if grad.shape[0] < ctx.rows:  # rows beyond the splits' sum were not sent: no gradient
            grad = torch.cat([grad, grad.new_zeros((ctx.rows - grad.shape[0],) + tuple(grad.shape[1:]))])
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rank r sends splits[d] rows of dimension 0 (an even split when None) to each member d of
    the set and receives what each member sends it, concatenated in member order. Returns the
    output, or (output, received_splits) when splits is given, as Horovod."""
    return _AlltoallFunction.apply(tensor, splits, name, process_set)


# --- reducescatter ---------------------------------------------------------------------------

def _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor):
    check(tensor, "reducescatter")
    source = tensor.contiguous()
    handle = enqueue(source, None, name, REDUCESCATTER, reduce_op=op, prescale=prescale_factor,
                     postscale=postscale_factor, process_set=process_set)

    def finish():
        if tensor.dim() == 0:
            # Horovod's negotiation refuses a rank-zero tensor on every rank; here the engine
            # has run it (so that every rank reaches this point) and each rank refuses it.
            raise HoraInternalError(f"reducescatter of tensor '{name}': a rank-zero (scalar) tensor cannot be "
                                    "scattered; give it at least one dimension")
        return engine_output(handle, tensor.dtype)

    return register(Pending([handle], (tensor, source), finish))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    op = resolve_reducescatter_op(op)
    return _reducescatter_async(tensor, auto_name("reducescatter", name, process_set), op, process_set,
                                prescale_factor, postscale_factor)


def _scale_reducescatter_grad(grad, op, process_set, prescale_factor, postscale_factor):
    """Horovod's reducescatter gradient before its allgather: times the set's size for Sum,
    times both scale factors."""
    if op == Sum:
        grad = grad * process_set.size()
    if prescale_factor != 1.0:
        grad = grad * prescale_factor
    if postscale_factor != 1.0:
        grad = grad * postscale_factor
    return grad


class _ReducescatterFunction(torch.autograd.Function):
    """Horovod's HorovodReducescatter: the gradient is the allgather of the scaled output
    gradients."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        op, ps, pre, post = ctx.args
        return allgather(_scale_reducescatter_grad(grad_output, op, ps, pre, post), process_set=ps), \
            None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """The reduction over ranks of `tensor`, of which each rank keeps its block of rows
    (dimension 0 split as evenly as possible, earlier ranks taking the remainder)."""
    compressed, ctx = compression.compress(tensor)
    out = _ReducescatterFunction.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    op = resolve_reducescatter_op(op)
    base = auto_name("grouped_reducescatter", name, process_set)
    return register_group([_reducescatter_async(t, f"{base}.{i}", op, process_set, prescale_factor,
                                                postscale_factor) for i, t in enumerate(tensors)])


class _GroupedReducescatterFunction(torch.autograd.Function):
    """Horovod's HorovodGroupedReducescatter: reducescatter's gradient for each tensor."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (op, process_set, prescale_factor, postscale_factor)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                             prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, ps, pre, post = ctx.args
        scaled = [_scale_reducescatter_grad(g, op, ps, pre, post) for g in grad_outputs]
        return (None, None, None, None, None, *grouped_allgather(scaled, process_set=ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor of the list, negotiated together; autograd flows through it."""
    compressed = [compression.compress(t) for t in tensors]
    outputs = _GroupedReducescatterFunction.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                  *[c for c, _ in compressed])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outputs, compressed)]
