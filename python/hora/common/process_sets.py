"""Process sets: sub-groups of ranks with their own negotiation (Horovod's
horovod.common.process_sets). As in Horovod, collectives take GLOBAL ranks (a broadcast's root
is the root's rank()); the engine numbers a set's members 0..k-1, which root_index()
translates to."""

import numbers
import threading

from hora import _core
from hora.common.identity import identity


class ProcessSet:
    """A sub-group of ranks (Horovod's hvd.ProcessSet); rank() is this process's position within
    the set, e.g. to find its block of an allgather."""

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
        """The number of ranks in the set, or None while it is not registered; ValueError for an
        id the running engine does not know (removed, or set by hand), as Horovod."""
        if self.process_set_id is None:
            return None
        _require_known(self.process_set_id)
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None while it is not registered; ValueError
        on a rank that is not a member (Horovod's behaviour)."""
        if self.process_set_id is None:
            return None
        me = identity()["rank"]
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not part of {self}")
        return self.ranks.index(me)

    def included(self):
        """Whether this process is a member (None when the set has no ranks, as Horovod)."""
        if self.ranks is None:
            return None
        return identity()["rank"] in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"


_lock = threading.Lock()
_unnamed_calls = {}  # (op, process set id) -> how many unnamed calls of op the set has had


def count_unnamed_call(op, process_set_id):
    """The number of this unnamed call of `op` in the set, from 0. A set added under the id of a
    removed one counts from 0 again: its members did not all belong to the removed set, and each
    must number alike."""
    with _lock:
        n = _unnamed_calls.get((op, process_set_id), 0)
        _unnamed_calls[(op, process_set_id)] = n + 1
    return n


def forget_unnamed_calls(process_set_id=None):
    """Restarts the numbering of one set's unnamed calls, or of every set's (at shutdown)."""
    with _lock:
        for key in [k for k in _unnamed_calls if process_set_id in (None, k[1])]:
            del _unnamed_calls[key]


# Every rank; its ranks are filled in by init (the job's size is known only then).
global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


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
    forget_unnamed_calls(process_set.process_set_id)  # the engine gives the id out again
    process_set.process_set_id = None
    return True


def process_set_ids_and_ranks():
    """{process_set_id: its ranks} of every set the engine knows, the global set's 0 included
    (Horovod's _basics._get_process_set_ids_and_ranks, which code written for it reads)."""
    return {i: list(_core.process_set_ranks(i)) for i in _core.process_set_ids()}


def register_at_init(process_sets, size):
    """What init does with its process_sets argument, after the engine has started with `size`
    ranks: ProcessSet objects to register now, on every rank alike, or "dynamic" (Horovod's
    switch for adding sets later, which hora always allows)."""
    global_process_set.ranks = list(range(size))
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(f"process_sets must be a list of ProcessSet or 'dynamic', not {process_sets!r}")
        process_sets = []
    for i, ps in enumerate(process_sets or []):
        try:
            add_process_set(ps)
        except ValueError as e:
            raise ValueError(f"process_sets entry number {i} cannot be registered: {e}") from e


def require_registered(process_set):
    """ValueError for a set the engine does not know (never added, or removed), before any
    request is made with it (Horovod's collectives ask the set's size first, which raises)."""
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered (hvd.add_process_set)")
    _require_known(process_set.process_set_id)


def _require_known(process_set_id):
    """ValueError for an id the running engine does not know (removed, or set by hand)."""
    if process_set_id != 0 and _core.is_initialized() and process_set_id not in _core.process_set_ids():
        raise ValueError(f"process set {process_set_id} is not known to hora (never added, or removed)")


def root_index(root_rank, process_set):
    """A broadcast root's number inside the set, which the engine takes, from its global rank
    (ValueError if it is not a member, as Horovod's 'invalid root rank')."""
    if process_set.process_set_id == 0:
        return int(root_rank)
    if root_rank not in process_set.ranks:
        raise ValueError(f"broadcast: root rank {root_rank} is not a member of {process_set}")
    return process_set.ranks.index(root_rank)


def process_set_by_id(process_set_id):
    """A ProcessSet object for a registered id (e.g. one a graph op recorded as an attr): the
    global set for 0, else the set's ranks as the engine knows them (Horovod's
    _temp_process_set_object)."""
    if process_set_id == 0:
        return global_process_set
    ps = ProcessSet(_core.process_set_ranks(process_set_id))
    ps.process_set_id = process_set_id
    return ps
