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

from hora.common.basics import size
from hora.common.elastic import is_elastic_job
from hora.common.ops import Adasum, Average, check_adasum
from hora.common.parameter_servers import ALLREDUCE, check_mode
from hora.common.process_sets import global_process_set
from hora.torch.adasum_optimizer import _DistributedAdasumOptimizer
from hora.torch.allreduce_ops import _gradient_allreduce_async_
from hora.torch.basics import note_compute_threads
from hora.torch.compression import Compression
from hora.torch.gather_ops import sparse_allreduce_async
from hora.torch.hooked_optimizer import HookedOptimizer, wrap
from hora.torch.ps_optimizer import ps_optimizer


class _DenseReduction:
    """A dense gradient's allreduce in flight; wait() returns the reduced gradient (p.grad
    itself when it was reduced in place)."""

    def __init__(self, handle, compressed, ctx, compression):
        self.handle, self.compressed, self.ctx, self.compression = handle, compressed, ctx, compression

    def wait(self):
        self.handle.wait()
        return self.compression.decompress(self.compressed, self.ctx)


class _SparseReduction:
    """A sparse gradient's allgather of indices and values (Horovod's sparse_allreduce_async)."""

    def __init__(self, wait):
        self.wait = wait


class _DistributedOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False, process_set=global_process_set):
        # self._handles: p -> _DenseReduction / _SparseReduction, or None while its group waits
        all_params = self._wrap_parameters(params, named_parameters, compression, backward_passes_per_step,
                                           "allreduce")
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._setup_groups(groups, all_params)
        self._synchronized = False
        self._should_synchronize = True
        # As Horovod: a rank outside the process set trains on its own gradients. An elastic job
        # of one rank may grow: its hooks must be there when it does.
        if process_set.included() and (size() > 1 or is_elastic_job()):
            self._register_hooks()

    def _setup_groups(self, groups, all_params):
        """groups: parameters whose gradients are reduced together, once all of them are ready."""
        self._group_of = {}
        self._group_members = {}
        self._group_ready = {}
        if groups is None:
            return
        if isinstance(groups, int):
            if groups <= 0:
                raise ValueError("groups must be a positive int or a list of lists of parameters")
            ordered = [p for p in all_params if p.requires_grad]
            per = -(-len(ordered) // groups)
            group_lists = [ordered[i:i + per] for i in range(0, len(ordered), per)]
        elif isinstance(groups, list):
            group_lists = [list(g) for g in groups]
            seen = set()
            for p in (p for g in group_lists for p in g):
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor")
                if id(p) in seen:
                    raise ValueError("a parameter can only appear once in groups")
                seen.add(id(p))
        else:
            raise ValueError("groups must be a positive int or a list of lists of parameters")
        for i, g in enumerate(group_lists):
            for p in g:
                self._group_of[p] = i
        self._group_members = dict(enumerate(group_lists))

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict, forgetting any reduction in flight."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed on this rank (a branch not taken); another rank may have it.
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        if p.grad.is_sparse and not self.sparse_as_dense:
            return _SparseReduction(sparse_allreduce_async(p.grad, name=name, op=self.op,
                                                           process_set=self.process_set))
        tensor = p.grad.to_dense() if p.grad.is_sparse else p.grad
        if self.op == Average:
            # Average divides by the number of ranks after the sum; the predivide factor moves part
            # of that division before it (less overflow in fp16).
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        compressed, ctx = self._compression.compress(tensor)
        handle = _gradient_allreduce_async_(compressed, name, self.op, prescale, postscale, self.process_set)
        return _DenseReduction(handle, compressed, ctx, self._compression)

    def _make_hook(self, p):
        def hook(*ignore):
            assert not p.grad.requires_grad
            reduction = None
            if self._count_backward_pass(p):
                if p in self._group_of:
                    self._group_ready_then_reduce(p)
                    return
                reduction = self._allreduce_grad_async(p)
            self._handles[p] = reduction

        return hook

    def _group_ready_then_reduce(self, p):
        g = self._group_of[p]
        ready = self._group_ready.setdefault(g, set())
        ready.add(p)
        self._handles[p] = None
        if len(ready) == len([q for q in self._group_members[g] if q.requires_grad]):
            for q in self._group_members[g]:
                if q.requires_grad:
                    self._handles[q] = self._allreduce_grad_async(q)
            ready.clear()

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hooks did not run, e.g.
        parameters unused in this pass) and writes the averages into the .grad fields. A rank
        outside the optimizer's process set has nothing to wait for."""
        if not self.process_set.included():
            self._synchronized = True
            return
        note_compute_threads()
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, reduction in list(self._handles.items()):
            if reduction is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, reduction in self._handles.items():
            reduced = reduction.wait()
            self._allreduce_delay[p] = self.backward_passes_per_step
            if p.grad.is_sparse:
                # A sparse .grad cannot be set_() or copy_()'d into: clear it and add the sum
                # (sparse_as_dense's result back in the gradient's own layout, rows for an embedding).
                p.grad.zero_().add_(reduced if reduced.is_sparse else reduced.to_sparse(p.grad.sparse_dim()))
            elif reduced is not p.grad:
                p.grad.copy_(reduced)
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
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are reduced a second time. Wrap step() "
                              "in `with optimizer.skip_synchronize():` when you call synchronize() yourself.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set,
                         mode=ALLREDUCE, max_staleness=None):
    """Wraps `optimizer` so that step() applies gradients averaged over the ranks (Horovod's
    hvd.DistributedOptimizer). The result is an instance of the optimizer's own class.
    sparse_as_dense: sparse gradients (nn.Embedding(sparse=True)) are allreduced as dense
    tensors; otherwise their indices and values are allgathered.
    mode: how gradients travel. "allreduce" (the default), or through the job's parameter
    servers (horarun --servers K; docs/parameter_servers.md): "ps-sync" (the servers sum, every
    worker gets the same mean: allreduce's result) or "ps-async" (the servers apply each worker's
    gradients at once with SGD and the worker takes their parameters; a torch.optim.SGD only).
    max_staleness (ps-async): no worker runs more than this many steps ahead of the slowest."""
    check_mode(mode, max_staleness)
    if mode != ALLREDUCE:
        if groups is not None or num_groups or process_set is not global_process_set or gradient_predivide_factor != 1.0:
            raise ValueError(f"mode={mode!r} takes no groups, process_set or gradient_predivide_factor")
        return ps_optimizer(wrap, optimizer, named_parameters, compression, backward_passes_per_step, op, mode,
                            max_staleness)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("num_groups is deprecated; use groups", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    if op == Adasum and size() > 1:
        # As Horovod: the deltas of the local steps are Adasum-reduced (adasum_optimizer.py); on
        # one rank the plain optimizer runs.
        if process_set.process_set_id not in (None, 0):
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        check_adasum("DistributedOptimizer", process_set)
        return wrap(optimizer, _DistributedAdasumOptimizer, named_parameters, compression, backward_passes_per_step)
    return wrap(optimizer, _DistributedOptimizer, named_parameters, compression, backward_passes_per_step, op,
                gradient_predivide_factor, groups, sparse_as_dense, process_set)
