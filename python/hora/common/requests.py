"""Requests to hora's engine on raw buffers, for every frontend: names for unnamed calls, the
enqueue of (name, kind, dtype, shape, data pointers, ...), the buffers the engine allocates,
the argument checks that need no tensor, join and barrier.

A frontend turns its tensors into these arguments (a dtype name of hora/types.h, a shape, data
pointers) and back; the data crosses without a copy."""

from hora import _core
from hora.common.process_sets import count_unnamed_call, global_process_set, require_registered

# The collective kinds, as the engine numbers them.
ALLREDUCE = _core.ALLREDUCE
ALLGATHER = _core.ALLGATHER
BROADCAST = _core.BROADCAST
ALLTOALL = _core.ALLTOALL
REDUCESCATTER = _core.REDUCESCATTER

def auto_name(op, name, process_set):
    """`name`, or the next "op.noname.N" of this op in this process set. Counting per set keeps
    the names of the ranks in step when the members of different sets make different numbers
    of calls."""
    if name is not None:
        return name
    n = count_unnamed_call(op, process_set.process_set_id)
    suffix = "" if process_set.process_set_id == 0 else f".set{process_set.process_set_id}"
    return f"{op}.noname.{n}{suffix}"


def enqueue(name, kind, dtype, shape, data, output=0, *, reduce_op=0, prescale=1.0, postscale=1.0, root=0,
            splits=(), process_set=global_process_set):
    """Hands one request to the engine and returns its handle (poll(), wait(), and output() when
    the engine allocated the result). dtype: a name of hora/types.h ("float32"); data and
    output: addresses of contiguous buffers (output 0: the engine allocates it); root: the
    root's number inside the set (process_sets.root_index)."""
    require_registered(process_set)
    return _core.enqueue(name, kind, _core.DATA_TYPES[dtype], list(shape), data, output, reduce_op, float(prescale),
                         float(postscale), int(root), [int(s) for s in splits], process_set.process_set_id)


def output_buffer(handle, element_size):
    """(bytes, shape) of the result the engine allocated for `handle`: a numpy uint8 array
    owning exactly the result's bytes, which a frontend views as its dtype without a copy."""
    shape = handle.output_shape()
    count = 1
    for d in shape:
        count *= d
    return handle.output()[:count * element_size], shape


def alltoall_counts(rows, splits, members):
    """Rows of dimension 0 for each member of the set, checked as Horovod checks them: splits
    is None (an even split, which must be exact), or one count per member summing to at most
    the first dimension (rows beyond the sum are not sent)."""
    if splits is None:
        if rows % members:
            raise ValueError(f"alltoall: splits not given, but the first dimension ({rows}) is not a multiple of "
                             f"the number of ranks ({members})")
        return [rows // members] * members
    counts = [int(s) for s in splits]
    if len(counts) != members:
        raise ValueError(f"alltoall: splits has {len(counts)} entries for {members} ranks")
    if any(c < 0 for c in counts):
        raise ValueError(f"alltoall: splits must not be negative: {counts}")
    if sum(counts) > rows:
        raise ValueError(f"alltoall: the splits sum to {sum(counts)}, more than the first dimension ({rows})")
    return counts


def join():
    """Tells the other ranks this one has no more data; until all have joined, their allreduces
    go on with zeros from this rank (Average divides by every rank, as Horovod's does). Returns
    the last rank to join."""
    return _core.join(0)


def barrier(process_set=global_process_set):
    """Returns when every rank of `process_set` has called barrier()."""
    _core.barrier(process_set.process_set_id)
