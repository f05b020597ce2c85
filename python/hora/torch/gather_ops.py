"""allgather, broadcast and the sparse allreduce built on allgather: collectives whose output
every rank receives whole (horovod.torch.mpi_ops's names; imported from there too).

Ranks in this module's arguments are GLOBAL ranks, as in Horovod: broadcast's root_rank is
hvd.rank() of the root, also with a process set (the engine numbers a set's members 0..k-1,
so the root is translated here)."""

import torch

from hora import _core
from hora.torch.basics import global_process_set, rank
from hora.torch.mpi_ops import (Average, _auto_name, _check, _engine_output, _enqueue, _Pending, _register,
                                _register_group, allreduce, grouped_allreduce, synchronize)

# --- allgather -------------------------------------------------------------------------------


def allgather_async(tensor, name=None, process_set=global_process_set):
    _check(tensor, "allgather")
    source = tensor.contiguous()
    handle = _enqueue(source, None, _auto_name("allgather", name, process_set), _core.ALLGATHER,
                      process_set=process_set)
    return _register(_Pending([handle], (tensor, source), lambda: _engine_output(handle, tensor.dtype)))


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
    base = _auto_name("grouped_allgather", name, process_set)
    return _register_group([allgather_async(t, name=f"{base}.{i}", process_set=process_set)
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

def _set_rank_of_root(root_rank, process_set):
    """The root's number inside the set, from its global rank (ValueError if not a member, as
    Horovod's 'invalid root rank')."""
    if process_set.process_set_id == 0:
        return int(root_rank)
    if root_rank not in process_set.ranks:
        raise ValueError(f"broadcast: root rank {root_rank} is not a member of {process_set}")
    return process_set.ranks.index(root_rank)


def _broadcast_async(tensor, output, root_rank, name, process_set):
    _check(tensor, "broadcast")
    root = _set_rank_of_root(root_rank, process_set)
    source = tensor if tensor.is_contiguous() else tensor.contiguous()
    target = output if output.is_contiguous() else torch.empty_like(output, memory_format=torch.contiguous_format)
    handle = _enqueue(source, target, _auto_name("broadcast", name, process_set), _core.BROADCAST, root=root,
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
