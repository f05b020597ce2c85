"""The reduce ops (hvd.Average, hvd.Sum, ...) and Horovod's rules for choosing one: the
deprecated `average=` argument, Adasum's limits, what reducescatter cannot do."""

import warnings

from hora import _core
from hora.common.exceptions import HoraInternalError
from hora.common.identity import identity

Average = _core.REDUCE_OPS["Average"]
Sum = _core.REDUCE_OPS["Sum"]
Min = _core.REDUCE_OPS["Min"]
Max = _core.REDUCE_OPS["Max"]
Product = _core.REDUCE_OPS["Product"]
# Horovod's Adasum (Note [adasum] in src/collectives/adasum.h): allreduce of floating-point
# tensors over every rank, their number a power of two.
Adasum = _core.REDUCE_OPS["Adasum"]


def check_adasum(name, process_set):
    """What Horovod refuses before Adasum runs on CPU tensors, with its messages."""
    if process_set is not None and process_set.process_set_id not in (None, 0):
        raise NotImplementedError(f"{name}: Adasum does not support non-global process sets yet.")
    n = identity()["size"]
    if n & (n - 1):
        raise NotImplementedError(f"{name}: Running Adasum with non-power of 2 ranks is not supported yet "
                                  f"(there are {n} ranks).")


def resolve_op(op, average, name="allreduce", process_set=None):
    """The op an allreduce runs: Horovod's rules for the deprecated `average` argument, then the
    op's validity (default Average)."""
    if op is not None and average is not None:
        raise ValueError(f"{name}: the op argument supersedes average; give only one of them")
    if average is not None:
        warnings.warn("the 'average' argument is deprecated; use op=hvd.Average or op=hvd.Sum", DeprecationWarning)
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        check_adasum(name, process_set)
    if op not in _core.REDUCE_OPS.values():
        raise ValueError(f"{name}: unknown reduce op {op!r}")
    return op


def resolve_reducescatter_op(op):
    """Horovod refuses an op its reducescatter cannot do with HorovodInternalError at the call
    (Adasum here); hora's engine also does Min, Max and Product."""
    if op == Adasum:
        raise HoraInternalError("reducescatter: Adasum is an allreduce only "
                                "(reducescatter supports Average, Sum, Min, Max and Product)")
    return resolve_op(op, None, "reducescatter")
