"""DistributedOptimizer(op=hvd.Adasum): Horovod's _DistributedAdasumOptimizer.

Adasum combines what each rank's optimizer would do, not the gradients: as soon as autograd has
produced a parameter's gradient (backward_passes_per_step times), the wrapped optimizer steps on
that parameter alone, from the parameter's value at the start of the step (`start`), and the
*delta* it made, new - start, is Adasum-allreduced in place while the backward pass goes on.
step() waits for every delta and sets each parameter to start + the reduced delta. A parameter
whose gradient never came (unused in the forward pass) is stepped and reduced in step(), so
every rank submits the same tensors.
"""

import contextlib

import torch

from hora.common.handles import synchronize
from hora.common.ops import Adasum
from hora.torch.allreduce_ops import allreduce_async_
from hora.torch.hooked_optimizer import HookedOptimizer


class _DistributedAdasumOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        # self._handles: p -> (handle, compression ctx, compressed delta), None while passes remain
        all_params = self._wrap_parameters(params, named_parameters, compression, backward_passes_per_step, "adasum")
        self._starts = {p: torch.zeros_like(p, requires_grad=False) for p in self._parameter_names}
        for p in all_params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)  # stepped in step() also when no gradient came
        self._register_hooks()

    def _step_only(self, p):
        """The wrapped optimizer's step on p alone (its state for p is kept, the others untouched)."""
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is q for q in group["params"]) else []
            super(self.__class__, self).step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _reduce_delta_async(self, p):
        """Steps p locally, turns p into its delta and starts the delta's Adasum allreduce."""
        start = self._starts[p]
        start.copy_(p.data)
        self._step_only(p)
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum)
        return handle, ctx, compressed

    def _make_hook(self, p):
        def hook(*_):
            self._handles[p] = self._reduce_delta_async(p) if self._count_backward_pass(p) else None
        return hook

    def synchronize(self):
        pass  # the deltas are waited for by step(), as in Horovod

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        # In parameter order, alike on every rank: the engine matches the submissions by name.
        for p in self._starts:
            if p in self._requires_update and self._handles.get(p) is None:
                self._handles[p] = self._reduce_delta_async(p)
        for p, (handle, ctx, compressed) in self._handles.items():
            synchronize(handle)
            delta = self._compression.decompress(compressed, ctx)
            start = self._starts[p]
            start.add_(delta)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss
