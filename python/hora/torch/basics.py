"""The process's place in the job, what this build can do, process sets and the timeline: the
parts of horovod.torch that move no tensors (Horovod's horovod.common.basics)."""

import numbers

import torch

from hora import _core

class ProcessSet:
    """A sub-group of ranks with its own negotiation (Horovod's hvd.ProcessSet). As in Horovod,
    collectives take GLOBAL ranks (a broadcast's root is hvd.rank() of the root); rank() is
    this process's position within the set, e.g. to find its block of an allgather."""

    mpi_comm = None  # Horovod's sets built from an MPI communicator; hora has none

    def __init__(self, ranks):
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise ValueError("ProcessSet takes a list of ranks (hora has no MPI communicators)")
        ranks = list(ranks)
        if any(not isinstance(r, numbers.Integral) or isinstance(r, bool) for r in ranks):
            raise ValueError(f"ProcessSet takes a list of integer ranks, got {ranks}")
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None while it is not registered; ValueError
        on a rank that is not a member (Horovod's behaviour)."""
        if self.process_set_id is None:
            return None
        me = _identity()["rank"]
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not part of {self}")
        return self.ranks.index(me)

    def included(self):
        """Whether this process is a member (None when the set has no ranks, as Horovod)."""
        if self.ranks is None:
            return None
        return _identity()["rank"] in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"


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
    """Registers a process set (a ProcessSet or a list of ranks) and returns it with its
    process_set_id; every rank calls it with the same ranks, in the same order. ValueError for
    a set whose ranks another registered set has already (including the global set)."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    for existing in _core.process_set_ids():
        if _core.process_set_ranks(existing) == ps.ranks:
            raise ValueError(f"attempted to add a duplicate process set: {ps} has the ranks of process set {existing}")
    ps.process_set_id = _core.add_process_set(ps.ranks)
    return ps


def remove_process_set(process_set):
    """Unregisters a set (every rank calls it); True when it was removed, False for the global
    set or a set that is not registered, as Horovod."""
    if process_set.process_set_id in (None, 0) or process_set.process_set_id not in _core.process_set_ids():
        return False
    _core.remove_process_set(process_set.process_set_id)
    process_set.process_set_id = None
    return True


def forget_identity():
    """After init or shutdown: the next question about ranks asks the engine again."""
    _identity_cache.clear()
