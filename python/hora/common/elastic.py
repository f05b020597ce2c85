"""The machinery of elastic training that every frontend shares (Horovod's
horovod.common.elastic): the run loop that resets and re-runs the training function, and the
State / ObjectState base classes (commit, restore, sync, host-update checks). A frontend adds
its own State for its models and optimizers, and its broadcast (docs/elastic.md).

commit() saves the state in memory and checks for host changes; restore() goes back to the last
commit; sync() gives every rank rank 0's state. Rank 0 of every generation is a member of the
previous one (the driver keeps their order), so it holds the last commit."""

import copy
import functools
import sys

from hora import _core
from hora.common import basics
from hora.common.exceptions import HoraInternalError, HostsUpdatedInterrupt, WorkerRemovedError


def is_elastic_job():
    """Whether this process was started by an elastic horarun (its job may grow and shrink)."""
    return _core.is_elastic()


def rejoin(init):
    """Leaves the current generation and joins the next with the frontend's `init`. A worker the
    driver removed leaves the job with exit code 0."""
    basics.shutdown()
    try:
        init()
    except WorkerRemovedError as e:
        print(f"hora: {e}; this worker leaves the job", file=sys.stderr, flush=True)
        sys.exit(0)


def run_fn(func, reset):
    """func wrapped to run on the workers of the current generation, again after every reset,
    until it returns (Horovod's hvd.elastic.run); reset() leaves the old generation and joins the
    next (e.g. rejoin with the frontend's init).

    When a collective failed (a worker was lost: HoraInternalError) the state goes back to its
    last commit; when the driver announced a host change (HostsUpdatedInterrupt, raised by
    commit() on every rank at the same step) it stays as it is. Either way every rank resets,
    rank 0's state is broadcast to all (sync; skipped when only hosts were removed), and func is
    called again."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HoraInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


class State:
    """The base of elastic state: commit / restore / sync, host-change checks and reset
    callbacks. bcast_object(obj) -> rank 0's obj on every rank, and get_rank() are the
    frontend's."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._last_host_update = 0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called after every reset (e.g. to rescale the learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in memory, then raises HostsUpdatedInterrupt if hosts changed. A commit
        copies the whole state: commit every few steps, trading the work redone after a failure
        against the copy's cost."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank at once when the driver announced a change
        since the last check (rank 0 asks the driver and tells the others)."""
        counter, kind = _core.elastic_host_updates() if self._rank() == 0 else (0, "")
        previous, counter, kind = self._bcast_object((self._last_host_update, counter, kind))
        self._last_host_update = max(previous, counter)
        if counter > previous:
            raise HostsUpdatedInterrupt(skip_sync=kind == "removed")

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before sync: for subclasses."""


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and kept as attributes."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))
