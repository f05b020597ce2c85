"""What the two forms of DistributedOptimizer share (optimizer.py reduces the gradients,
adasum_optimizer.py the deltas of the local steps): wrapping the user's optimizer, parameter
names with Horovod's checks, a hook on each parameter's gradient accumulator that counts the
backward passes of a step, and the guard of zero_grad.

The wrapper is an instance of the user's optimizer class (Horovod's way: isinstance checks and
the optimizer's own step() keep working), built by wrap() from that class and a form's methods;
`super(self.__class__, self)` in those methods is the user's class."""

import torch


def checked_names(named_parameters, all_params):
    """(name, parameter) pairs for every parameter, with Horovod's checks and messages."""
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
    return named_parameters


class HookedOptimizer(torch.optim.Optimizer):
    """The methods both forms have. A form defines _make_hook(p) and keeps in self._handles, per
    parameter, its reduction in flight (None while it waits: for more backward passes, or for
    the rest of its group)."""

    def _wrap_parameters(self, params, named_parameters, compression, backward_passes_per_step, name_prefix):
        """The state both forms start with; the engine knows each parameter as prefix.name."""
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = {p: f"{name_prefix}.{name}" for name, p in checked_names(named_parameters, all_params)}
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        return all_params

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                # The gradient accumulator of p: its hook runs once p.grad holds this pass's sum.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._grad_accs.append(accumulator)

    def _count_backward_pass(self, p):
        """Counts a backward pass of p; True when it was the step's last (p is reduced now)."""
        if self._handles.get(p) is not None and self._allreduce_delay[p] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before call to step(). "
                "Increase backward_passes_per_step to accumulate gradients locally.")
        assert self._allreduce_delay[p] > 0
        self._allreduce_delay[p] -= 1
        return self._allreduce_delay[p] == 0

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def wrap(optimizer, form, *args):
    """`optimizer` (its param_groups) wrapped by `form`, a subclass of HookedOptimizer: an
    instance of the optimizer's own class with the methods of HookedOptimizer and `form`."""
    methods = {**HookedOptimizer.__dict__, **form.__dict__}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    wrapped = cls(optimizer.param_groups, *args)
    # Made from the param_groups alone, the new instance lacks the state `optimizer` holds: a
    # checkpoint loaded into it, or Adagrad's sums, which it starts at its constructor's
    # initial_accumulator_value (not the group's). Both step the same parameters: the state carries over.
    wrapped.state.update(optimizer.state)
    return wrapped
