"""DistributedOptimizer (horovod.torch.optimizer): averages gradients across ranks while the
backward pass is still running.

A hook on each parameter's gradient accumulator enqueues that gradient's allreduce as soon as
autograd has produced it, so the engine reduces (and fuses) the late layers' gradients while
the early layers still compute theirs; step() waits for the rest and then runs the wrapped
optimizer's step.
"""

import contextlib
import warnings

import torch

from hora.torch.compression import Compression
from hora.torch.basics import global_process_set, note_compute_threads, size
from hora.torch.mpi_ops import Adasum, Average, _gradient_allreduce_async_


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if op is Adasum:
            raise ValueError("Adasum is not supported by hora")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [(f"allreduce.noname.{i}", p) for i, p in enumerate(all_params)]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters().")
        names = [name for name, _ in named_parameters]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Parameter names in named_parameters must be unique. Found duplicates: {', '.join(duplicates)}")
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [id(p) for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named. "
                             f"Python object ids: {', '.join(str(i) for i in unnamed)}")
        self._parameter_names = {p: f"allreduce.{name}" for name, p in named_parameters}

        # groups: parameters whose gradients are reduced together, once all of them are ready.
        self._group_of = {}
        if groups is not None:
            if isinstance(groups, int):
                if groups <= 0:
                    raise ValueError("groups must be a positive int or a list of lists of parameters")
                ordered = [p for p in all_params if p.requires_grad]
                per = -(-len(ordered) // groups)
                group_lists = [ordered[i:i + per] for i in range(0, len(ordered), per)]
            else:
                group_lists = [list(g) for g in groups]
            for i, g in enumerate(group_lists):
                for p in g:
                    self._group_of[p] = i
            self._group_members = {i: g for i, g in enumerate(group_lists)}
        self._group_ready = {}

        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._synchronized = False
        self._should_synchronize = True
        if process_set.size() > 1 or size() > 1:
            self._register_hooks()

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                p.grad = p.data.new(p.size()).zero_()
                self._requires_update.add(p)
                # The gradient accumulator of p: its hook runs once p.grad holds this pass's sum.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._grad_accs.append(accumulator)

    def _allreduce_grad_async(self, p):
        if self.op == Average:
            # Average divides by the number of ranks after the sum; the predivide factor moves part
            # of that division before it (less overflow in fp16).
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        compressed, ctx = self._compression.compress(p.grad)
        handle = _gradient_allreduce_async_(compressed, self._parameter_names.get(p), self.op, prescale, postscale,
                                            self.process_set)
        return handle, (compressed, ctx)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to step(). "
                    "Increase backward_passes_per_step to accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if p in self._group_of:
                    self._group_ready_then_reduce(p)
                    return
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def _group_ready_then_reduce(self, p):
        g = self._group_of[p]
        ready = self._group_ready.setdefault(g, set())
        ready.add(p)
        self._handles[p] = (None, None)
        if len(ready) == len([q for q in self._group_members[g] if q.requires_grad]):
            for q in self._group_members[g]:
                if q.requires_grad:
                    self._handles[q] = self._allreduce_grad_async(q)
            ready.clear()

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hooks did not run, e.g.
        parameters unused in this pass) and writes the averages into the .grad fields."""
        note_compute_threads()
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, (compressed, ctx)) in self._handles.items():
            handle.wait()  # reduces `compressed` in place
            self._allreduce_delay[p] = self.backward_passes_per_step
            if ctx is not None or compressed is not p.grad:
                p.grad.copy_(self._compression.decompress(compressed, ctx))
        self._handles.clear()
        self._group_ready.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() right after an explicit synchronize() (e.g. to clip gradients between)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without a loss.backward() call after "
                              "optimizer.synchronize(). Use optimizer.skip_synchronize() around step() "
                              "when you call synchronize() yourself.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` so that step() applies gradients averaged over the ranks (Horovod's
    hvd.DistributedOptimizer). The result is an instance of the optimizer's own class."""
    if num_groups != 0:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning)
        groups = groups or num_groups
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, process_set)
