"""allgather, broadcast and the sparse allreduce built on allgather: collectives whose output
every rank receives whole (horovod.torch.mpi_ops's names; imported from there too).

Ranks in this module's arguments are GLOBAL ranks, as in Horovod: broadcast's root_rank is
hvd.rank() of the root, also with a process set (the engine numbers a set's members 0..k-1,
which hora.common.process_sets.root_index translates to)."""

import torch

from hora.common.basics import rank
from hora.common.handles import Pending, register, register_group, synchronize
from hora.common.ops import Average
from hora.common.process_sets import global_process_set, root_index
from hora.common.requests import ALLGATHER, BROADCAST, auto_name
from hora.torch.allreduce_ops import allreduce, grouped_allreduce
from hora.torch.buffers import check, engine_output, enqueue, register_into

# --- allgather -------------------------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    check(tensor, "allgather")
    source = tensor.contiguous()
    handle = enqueue(source, None, auto_name("allgather", name, process_set), ALLGATHER, process_set=process_set)
    return register(Pending([handle], (tensor, source), lambda: engine_output(handle, tensor.dtype)))


def _my_rows_of_gathered(grad, rows, process_set):
    """The rows of `grad` (a gradient of an allgather's output) that came from this rank: the
    ranks' row counts are gathered to find where this rank's block starts."""
    counts = allgather(torch.tensor([rows], dtype=torch.int32), process_set=process_set)
    offset = int(counts[:process_set.rank()].sum())
    return grad.narrow(0, offset, rows)


class _AllgatherFunction(torch.autograd.Function):
    """Horovod's HorovodAllgather: the gradient is this rank's block of the Average allreduce
    of the output gradients."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        return _my_rows_of_gathered(grad, ctx.rows, ctx.process_set), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation over ranks of `tensor` along dimension 0 (which may differ by rank)."""
    return _AllgatherFunction.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    base = auto_name("grouped_allgather", name, process_set)
    return register_group([allgather_async(t, name=f"{base}.{i}", process_set=process_set)
                           for i, t in enumerate(tensors)])


class _GroupedAllgatherFunction(torch.autograd.Function):
    """Horovod's HorovodGroupedAllgather: allgather's gradient, for each tensor of the list."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        ps = ctx.process_set
        grads = grouped_allreduce(list(grad_outputs), op=Average, process_set=ps)
        counts = grouped_allgather([torch.tensor([r], dtype=torch.int32) for r in ctx.rows], process_set=ps)
        mine = ps.rank()
        return (None, None, *[g.narrow(0, int(c[:mine].sum()), rows)
                              for g, c, rows in zip(grads, counts, ctx.rows)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of the list, negotiated together; autograd flows through it."""
    return list(_GroupedAllgatherFunction.apply(name, process_set, *tensors))


# --- sparse allreduce ------------------------------------------------------------------------

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """The allreduce of a sparse COO tensor as Horovod does it: allgather of the indices and the
    values (their concatenation is the sum, duplicates summing when coalesced), values divided
    by the set's size for Average. Returns a function that waits and returns the sparse sum."""
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                              process_set=process_set)
    values = allgather_async(tensor._values(), name=f"{name}.values", process_set=process_set)

    def wait():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / process_set.size()
        return torch.sparse_coo_tensor(gathered_indices.transpose(0, 1), gathered_values, tensor.size())

    return wait


# --- broadcast -------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set):
    check(tensor, "broadcast")
    root = root_index(root_rank, process_set)
    return register_into(tensor, output, auto_name("broadcast", name, process_set), BROADCAST, root=root,
                         process_set=process_set)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), root_rank,
                            name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


class _BroadcastFunction(torch.autograd.Function):
    """Horovod's HorovodBroadcast: the root's gradient is the Average allreduce of the output
    gradients; every other rank's is zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """`tensor` as global rank `root_rank` holds it, on every rank of the set (a new tensor)."""
    return _BroadcastFunction.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))
