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

from hora.torch.mpi_ops import Adasum, allreduce_async_, synchronize


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        # Imported here: optimizer.py imports this module.
        from hora.torch.optimizer import _checked_names

        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        all_params = [p for group in self.param_groups for p in group["params"]]
        named = _checked_names(named_parameters, all_params)
        self._parameter_names = {p: f"adasum.{name}" for name, p in named}
        self._allreduce_delay = {p: backward_passes_per_step for _, p in named}
        self._starts = {p: torch.zeros_like(p, requires_grad=False) for _, p in named}
        self._handles = {}  # p -> (handle, compression ctx); handle None while passes remain
        self._grad_accs = []
        self._requires_update = set()
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                p.grad = torch.zeros_like(p)
                self._requires_update.add(p)
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._grad_accs.append(accumulator)

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
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before call "
                                     "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
            self._allreduce_delay[p] -= 1
            self._handles[p] = self._reduce_delta_async(p) if self._allreduce_delay[p] == 0 else (None, None, None)
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
            if p in self._requires_update and (p not in self._handles or self._handles[p][0] is None):
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

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                                 "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)
