"""What a PyTorch elastic job keeps across resets (Horovod's State, ObjectState, TorchState):
hora.common.elastic's State and ObjectState with torch's broadcast_object and rank as their
defaults, and TorchState for models, optimizers and ElasticSamplers."""

import copy

import torch

from hora.common import elastic
from hora.common.basics import rank
from hora.common.exceptions import HostsUpdatedInterrupt  # noqa: F401  (importable from here, as it was)
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class State(elastic.State):
    """The base of elastic state (hora.common.elastic.State), broadcasting with torch."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)


class ObjectState(elastic.ObjectState, State):
    """State of plain Python objects, given as keyword arguments and kept as attributes
    (hora.common.elastic.ObjectState). Also derived from this module's State, so that
    isinstance(state, hvd.elastic.State) holds for it and for TorchState, as before."""

    def __init__(self, bcast_object=broadcast_object, get_rank=rank, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)


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
