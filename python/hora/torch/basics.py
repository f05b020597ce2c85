"""The process's place in the job, what this build can do, process sets and the timeline: the
parts of horovod.torch that move no tensors (Horovod's horovod.common.basics)."""

import torch

from hora import _core

class ProcessSet:
    """A sub-group of ranks with its own negotiation (Horovod's hvd.ProcessSet). Ranks inside a
    set (as for a broadcast's root) are numbered within the set."""

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def size(self):
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None when it is not a member."""
        me = _identity()["rank"]
        return self.ranks.index(me) if me in self.ranks else None

    def included(self):
        return self.rank() is not None

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_identity_cache = {}


def _identity():
    if not _identity_cache:
        if not _core.is_initialized():
            raise ValueError("hora has not been initialized; use hvd.init().")
        _identity_cache.update(_core.identity())
    return _identity_cache


def note_compute_threads():
    """Tells the engine how many threads torch computes with, so that hora's waiting threads
    leave those cores alone (scripts often call torch.set_num_threads after init)."""
    _core.set_compute_threads(torch.get_num_threads())


def is_initialized():
    return _core.is_initialized()


def rank():
    return _identity()["rank"]


def size():
    return _identity()["size"]


def local_rank():
    return _identity()["local_rank"]


def local_size():
    return _identity()["local_size"]


def cross_rank():
    return _identity()["cross_rank"]


def cross_size():
    return _identity()["cross_size"]


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    ident = _identity()
    return ident["local_size"] * ident["cross_size"] == ident["size"]


# Capabilities, answered truthfully: hora has its own transport and links no MPI, gloo or NCCL.
def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _core.stop_timeline()


def add_process_set(process_set):
    """Registers a process set; every rank calls it with the same ranks, in the same order."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"{ps} is registered already")
    ps.process_set_id = _core.add_process_set(ps.ranks)
    return ps


def remove_process_set(process_set):
    if process_set.process_set_id in (None, 0):
        raise ValueError(f"{process_set} cannot be removed")
    _core.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    return True


def forget_identity():
    """After init or shutdown: the next question about ranks asks the engine again."""
    _identity_cache.clear()
