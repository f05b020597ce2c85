"""What an elastic job keeps across resets (Horovod's State, ObjectState, TorchState).

commit() saves the state in memory and checks for host changes; restore() goes back to the last
commit; sync() gives every rank rank 0's state. Rank 0 of every generation is a member of the
previous one (the driver keeps their order), so it holds the last commit.
"""

import copy

import torch

from hora import _core
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from hora.torch.basics import rank


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by commit() / check_host_updates() on every rank at the same step when the driver
    announced that hosts were added or removed. skip_sync: only hosts were removed, so the
    remaining ranks already agree and need no broadcast."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


class State:
    """The base of elastic state: commit / restore / sync, host-change checks and reset callbacks."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank):
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

    def __init__(self, bcast_object=broadcast_object, get_rank=rank, **kwargs):
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


class _Handler:
    """Saves, restores and syncs one attribute of a TorchState whose type needs more than
    broadcast_object (a model, an optimizer, an ElasticSampler)."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def reset(self):
        """After a reset, before sync: adapt to the new generation."""


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        # A hora DistributedOptimizer's load_state_dict also drops the reductions of the failed step.
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))

    def reset(self):
        # Re-shard the rest of the epoch over the new ranks, also when sync is skipped (only hosts
        # were removed: no broadcast, but fewer ranks).
        self.value.reset()


_HANDLERS = [(torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (ElasticSampler, _SamplerHandler)]


class TorchState(ObjectState):
    """The state of a PyTorch training: a model, an optimizer, and any other keyword arguments
    (ElasticSamplers, modules and optimizers get their own handling; the rest are plain objects).
    Assigning to an attribute of one of those kinds saves it at once, as Horovod does."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            kind = next((h for t, h in _HANDLERS if isinstance(value, t)), None)
            if kind is not None:
                handlers[name] = kind(value)
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
