"""The handle table: what an async collective returns (an int, as in Horovod), poll() and
synchronize() on it. A frontend registers a Pending with the engine's handles, what must stay
alive until they complete, and how to produce the caller's result; the table never looks at
tensors, so every frontend shares it."""

import threading

_lock = threading.Lock()
_pending = {}  # int -> Pending
_last_handle = 0


class Pending:
    """A collective in flight: the engine's handles (none for a group), the objects it reads
    and writes (kept alive until it completes; a group's member handles) and finish(), which
    produces the caller's result once the engine's handles have completed."""

    def __init__(self, handles, keep, finish):
        self.handles = handles
        self.keep = keep
        self.finish = finish


def register(pending):
    """The int handle of `pending`, for poll() and synchronize()."""
    global _last_handle
    with _lock:
        _last_handle += 1
        _pending[_last_handle] = pending
        return _last_handle


def register_group(ids):
    """One handle for several: synchronize() returns the list of their outputs."""
    return register(Pending([], ids, lambda: _synchronize_all(ids)))


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


def poll(handle):
    """True when the operation behind `handle` has completed (then synchronize returns at once).
    ValueError for a handle that does not exist or was synchronized already, as Horovod."""
    with _lock:
        pending = _pending.get(handle)
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
        pending = _pending.pop(handle, None)
    if pending is None:
        return None
    for h in pending.handles:
        h.wait()
    return pending.finish()


def forget():
    """At shutdown: the operations in flight are gone with the engine."""
    with _lock:
        _pending.clear()
