"""DistributedOptimizer(..., mode="ps-sync" | "ps-async"): gradients travel through the job's
parameter servers (docs/parameter_servers.md) instead of allreduce.

ps-sync: step() pushes every gradient, the servers answer with the mean (op=Average) or sum
(op=Sum) over the workers, written back into .grad, and the wrapped optimizer steps as after an
allreduce. ps-async: step() pushes the gradients, the servers apply them with their own SGD,
Adam, AdamW, Adagrad, RMSprop, Adamax, Adadelta, NAdam or RAdam (the wrapped optimizer's options,
weight decay included; lr and momentum as they are at that step, so that a scheduler's changes
reach them) and answer with their parameters, which are copied into the model; the wrapped
optimizer's own step does not run.
Its state lives on the servers: state_dict() pulls it from them (torch's keys: a checkpoint loads
into a plain torch optimizer too), and the first step registers the state the optimizer holds
then (loaded from a checkpoint, or an elastic commit) as the servers' starting point.

A hook on each parameter's gradient accumulator hands the gradient to the client once the
step's last backward pass has produced it, so the pushes go out while the backward pass goes on
(Note [overlapped pushes] in src/ps/client.cc); step() (or synchronize()) pushes whatever no hook
handed over and waits for the servers' answers. compression=Compression.fp16 sends the pushes (and
ps-sync's answers) as float16 (float64 parameters refuse it). The servers hold, sum and apply a
float64 parameter in float64, the others in float32, also float16 and bfloat16 ones (whose float32
copies on the servers are then ps-async's master weights).

In an elastic job a failed exchange (a server or a worker died) raises HoraInternalError, so that
hvd.elastic.run restores the last commit and re-forms the job; the first step after that connects
to the new generation's servers (docs/parameter_servers.md, "Servers in an elastic job")."""

import contextlib
import warnings

import torch

from hora.common.ops import Average, Sum
from hora.common.exceptions import HoraInternalError
from hora.common.parameter_servers import (PS_ASYNC, PS_SYNC, ParameterServerClient, check_servers,
                                           elastic_place, warn_of_async_momentum)
from hora.torch.compression import Compression
from hora.torch.hooked_optimizer import HookedOptimizer


# What the servers run of each torch optimizer: its name there, the options the servers lack (each
# must keep the neutral value given), and the options every param group must share. foreach,
# capturable, differentiable and fused change how torch computes, not what: they are not looked at.
# weight_decay is added to the gradient, but AdamW's, which is decoupled from it (AdamW first: newer
# torch makes it a subclass of Adam).
_SERVER_OPTIMIZERS = (
    (torch.optim.SGD, "sgd", (("dampening", 0), ("nesterov", False), ("maximize", False)),
     ("lr", "momentum", "weight_decay")),
    (torch.optim.AdamW, "adam", (("amsgrad", False), ("maximize", False)), ("lr", "betas", "eps", "weight_decay")),
    (torch.optim.Adam, "adam", (("amsgrad", False), ("maximize", False)), ("lr", "betas", "eps", "weight_decay")),
    (torch.optim.Adagrad, "adagrad", (("maximize", False),),
     ("lr", "lr_decay", "eps", "initial_accumulator_value", "weight_decay")),
    (torch.optim.RMSprop, "rmsprop", (("maximize", False),),
     ("lr", "alpha", "eps", "momentum", "centered", "weight_decay")),
    (torch.optim.Adamax, "adamax", (("maximize", False),), ("lr", "betas", "eps", "weight_decay")),
    (torch.optim.Adadelta, "adadelta", (("maximize", False),), ("lr", "rho", "eps", "weight_decay")),
    (torch.optim.NAdam, "nadam", (("maximize", False),),
     ("lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay")),
    (torch.optim.RAdam, "radam", (("maximize", False),),
     ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay")),
)
_SERVED = "SGD, Adam, AdamW, Adagrad, RMSprop, Adamax, Adadelta, NAdam or RAdam"

# torch before 2.0 computed NAdam's product of momenta for the next step with this step's momentum
# twice (fixed in 2.0); the servers compute what this torch's own NAdam does.
_NADAM_TORCH1_FORM = int(torch.__version__.split(".")[0]) < 2


def server_optimizer(optimizer):
    """What the servers apply ps-async pushes with, as ParameterServerClient takes it: the wrapped
    torch.optim.SGD's, Adam's, AdamW's, Adagrad's, RMSprop's, Adamax's, Adadelta's, NAdam's or
    RAdam's options now (every param group alike); ValueError naming the option for anything the
    servers cannot run."""
    groups = optimizer.param_groups
    kind = next((entry for entry in _SERVER_OPTIMIZERS if isinstance(optimizer, entry[0])), None)
    if kind is None:
        raise ValueError(f"mode='ps-async' runs {_SERVED} on the servers: wrap one of those torch.optim "
                         f"optimizers, not {type(optimizer).__name__}")
    _, name, neutral_options, keys = kind
    for key, neutral in neutral_options:
        if any(g.get(key, neutral) != neutral for g in groups):
            raise ValueError(f"mode='ps-async': the servers' {type(optimizer).__name__} has no {key}; set it to "
                             f"{neutral!r}")
    first = {k: groups[0].get(k, 0) for k in keys}
    if any(g.get(k, 0) != first[k] for g in groups for k in keys):
        raise ValueError(f"mode='ps-async': every param group must have the same {', '.join(keys)}")
    options = {"name": name, "lr": float(first["lr"]), "weight_decay": float(first["weight_decay"]),
               # AdamW's, and torch 2's NAdam's and RAdam's with decoupled_weight_decay: p -= lr wd p
               "decoupled_weight_decay": isinstance(optimizer, torch.optim.AdamW) or
               bool(first.get("decoupled_weight_decay"))}
    if name == "sgd":
        options["momentum"] = float(first["momentum"])
    elif name in ("adam", "adamax", "nadam", "radam"):
        beta1, beta2 = first["betas"]
        options.update(beta1=float(beta1), beta2=float(beta2), epsilon=float(first["eps"]))
        if name == "nadam":
            options.update(momentum_decay=float(first["momentum_decay"]), nadam_torch1_form=_NADAM_TORCH1_FORM)
    elif name == "adagrad":
        options.update(lr_decay=float(first["lr_decay"]), epsilon=float(first["eps"]),
                       initial_accumulator_value=float(first["initial_accumulator_value"]))
    elif name == "adadelta":
        options.update(rho=float(first["rho"]), epsilon=float(first["eps"]))
    else:  # torch's alpha is the decay of the mean square, which the servers call rho
        options.update(rho=float(first["alpha"]), epsilon=float(first["eps"]), momentum=float(first["momentum"]),
                       centered=bool(first["centered"]))
    return options


def _slot_names(options):
    """The wrapped optimizer's state keys for the slots the servers keep (ps-async, the order of
    ParameterServerClient.optimizer_slots), by server_optimizer's answer `options`."""
    return {"sgd": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum",),
            "adamax": ("exp_avg", "exp_inf"), "adadelta": ("square_avg", "acc_delta"),
            "nadam": ("exp_avg", "exp_avg_sq"), "radam": ("exp_avg", "exp_avg_sq"),
            "rmsprop": ("momentum_buffer", "square_avg") + (("grad_avg",) if options.get("centered") else ())
            }[options["name"]]


# The parameters' dtypes the servers take (Note [half-precision parameters]): float64 ones they
# hold, sum and apply in float64 (Note [element types] in src/ps/shard_state.h), the others in float32.
_SERVED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _served_dtype(p):
    """The dtype the servers hold parameter `p` (and its gradient and optimizer slots) in."""
    return torch.float64 if p.dtype == torch.float64 else torch.float32


class _ParameterServerOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op, mode, max_staleness,
                 server_options):  # server_options: server_optimizer's answer, or None (ps-sync)
        all_params = self._wrap_parameters(params, named_parameters, compression, backward_passes_per_step,
                                           "ps")
        self._mode = mode
        self._params = [p for p in all_params if p.requires_grad]
        for p in self._params:
            if p.dtype not in _SERVED_DTYPES or p.device.type != "cpu":
                raise ValueError(f"mode={mode!r} takes float32, float64, float16 or bfloat16 CPU parameters; "
                                 f"{self._parameter_names[p]} is {p.dtype} on {p.device}")
            if p.dtype == torch.float64 and compression is Compression.fp16:
                # float16 keeps 11 of float64's 53 bits: not what a float64 model asks for.
                raise ValueError(f"mode={mode!r}: Compression.fp16 takes float32, float16 or bfloat16 parameters; "
                                 f"{self._parameter_names[p]} is float64 (use Compression.none, or make it float32)")
            if not p.data.is_contiguous():
                p.data = p.data.contiguous()
        # Note [half-precision parameters]: the servers hold float32 (float64 parameters: float64,
        # as they are). A float16 or bfloat16 parameter's gradient goes to them through a float32
        # copy, and ps-async's answer comes back into a float32 copy of the parameter (rounded into
        # the model after each step), so the servers' parameters are float32 master weights:
        # updates smaller than the parameter's precision add up there instead of rounding away.
        narrow = [p for p in self._params if p.dtype in _HALF_DTYPES]
        self._wide_grads = {p: torch.empty(p.shape, dtype=torch.float32) for p in narrow}
        self._masters = {p: torch.empty(p.shape, dtype=torch.float32) for p in narrow} if mode == PS_ASYNC else {}
        self._widened = set()  # the parameters whose gradient of this step the hooks copied already
        self._index = {p: i for i, p in enumerate(self._params)}
        self.parameter_server_step = None  # the last step's PsStep
        self._step_begun = False  # a hook handed a gradient of this step to the client
        self._synchronized = False
        self._should_synchronize = True
        self._client_options = dict(average=(op == Average), max_staleness=max_staleness, optimizer=server_options,
                                    fp16=compression is Compression.fp16,
                                    dtypes=[str(_served_dtype(p)).replace("torch.", "") for p in self._params])
        check_servers()  # now, where the user made the optimizer, rather than at the first step
        self._client = None  # connected at the first step (_begin_step)
        self._register_hooks()

    def _connect(self):
        # ps-async: every worker starts from the servers' parameters and optimizer state (worker
        # 0's): the state this optimizer holds, restored from a checkpoint or an elastic commit.
        initial, initial_state = (), None
        if self._mode == PS_ASYNC:
            # Copies, which the registration overwrites with the servers' parameters: a hook may
            # connect in the middle of the backward pass, which still reads the parameters. The
            # step's reply brings the servers' parameters into the model.
            registered = [p.data.to(_served_dtype(p), copy=True) for p in self._params]
            initial = [t.data_ptr() for t in registered]
            if any(self.state.get(p) for p in self._params):
                step, slots = self._server_state()
                initial_state = (step, [[t.data_ptr() for t in slot] for slot in slots])
        self._client = ParameterServerClient([p.numel() for p in self._params], self._mode, initial=initial,
                                             initial_state=initial_state, **self._client_options)

    def _server_state(self):
        """ps-async: (step, tensors by slot, then by parameter) of the servers' optimizer state as
        the wrapped optimizer's own state holds it (torch's keys and layout), made zero where missing."""
        options = self._client_options["optimizer"]
        names = _slot_names(options)
        slots = [[] for _ in names]
        step = 0
        for p in self._params:
            state = self.state[p]
            if "step" in state:
                step = int(float(state["step"]))
            for slot, name in zip(slots, names):
                t = state.get(name)
                if t is None:  # where torch starts it (Adagrad's sum: at initial_accumulator_value)
                    start = options.get("initial_accumulator_value", 0.0) if name == "sum" else 0.0
                    t = torch.full(p.shape, start, dtype=_served_dtype(p))
                elif t.shape != p.shape:
                    raise ValueError(f"mode='ps-async': the optimizer's {name!r} of {self._parameter_names[p]} has "
                                     f"shape {tuple(t.shape)}, the parameter {tuple(p.shape)}")
                state[name] = t = t.to(_served_dtype(p), memory_format=torch.contiguous_format)
                slot.append(t)
        return step, slots

    def _pull_server_state(self):
        """ps-async: the servers' optimizer state now, into the wrapped optimizer's state."""
        _, slots = self._server_state()
        step = self._client.pull_optimizer_state([[t.data_ptr() for t in slot] for slot in slots])
        options = self._client_options["optimizer"]
        if options["name"] == "sgd":
            return  # torch's SGD counts no steps
        counts = {"step": float(step)}
        if options["name"] == "nadam":
            counts["mu_product"] = self._client.nadam_momentum_product(step)
        for p in self._params:
            for key, value in counts.items():
                old = self.state[p].get(key)
                if isinstance(old, torch.Tensor):
                    old.fill_(value)  # its shape and device as torch made it (capturable: (1,))
                else:
                    self.state[p][key] = torch.tensor(value)

    def state_dict(self):
        """The wrapped optimizer's state_dict. ps-async: the servers hold the optimizer's state
        (momentum buffers, Adam's moments and step, ...), so it is pulled from them first, into
        the wrapped optimizer's state under torch's own keys: a checkpoint or an elastic commit
        holds it, a job restored from it starts its servers from it (also a plain torch optimizer
        can load it). The pull is a round trip to every server, between steps."""
        if self._mode == PS_ASYNC and self._client is not None and not self._client.stale():
            self._pull_server_state()
        return super(self.__class__, self).state_dict()

    def _make_hook(self, p):
        index = self._index[p]

        def hook(*ignore):
            if not self._count_backward_pass(p):
                return
            self._handles[p] = index
            grad = p.grad
            if grad is None or grad.is_sparse or not grad.is_contiguous():
                return  # synchronize() makes it a dense one and pushes it
            if p in self._wide_grads:
                grad = self._wide_grads[p]
                grad.copy_(p.grad)
                self._widened.add(p)
            self._begin_step()
            self._client.ready(index, grad.data_ptr())

        return hook

    def _begin_step(self):
        """Before the step's first push: ps-async pushes carry this step's lr and momentum, as a
        scheduler left them (it steps after optimizer.step(), so they hold for the whole pass)."""
        if self._step_begun:
            return
        if self._client is None or self._client.stale():
            # The first step, or the elastic job re-formed (its old servers are gone; the new ones
            # know this worker by its new rank). ps-async registers the parameters and optimizer
            # state as they are now: loaded from a checkpoint and broadcast after the optimizer was
            # made, or rank 0's restored commit (on every worker after sync()).
            if self._client is not None:
                self._client.close()
            self._connect()
        self._step_begun = True
        if self._mode == PS_ASYNC:
            now = server_optimizer(self)
            warn_of_async_momentum(now.get("momentum", 0.0), stacklevel=5)  # a schedule may have raised it
            self._client.set_sgd(now["lr"], now.get("momentum", 0.0))

    def synchronize(self):
        """Pushes the gradients no hook handed over yet and takes in the servers' answer: ps-sync
        the reduced gradients in .grad, ps-async the servers' parameters (step() calls it)."""
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p.data)
            elif p.grad.is_sparse:
                p.grad = p.grad.to_dense()
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            wide = self._wide_grads.get(p)
            if wide is not None and p not in self._widened:
                wide.copy_(p.grad)
            grads.append(p.grad if wide is None else wide)
        outputs = grads if self._mode == PS_SYNC else [self._masters.get(p, p.data) for p in self._params]
        self._begin_step()
        try:
            with torch.no_grad():
                self.parameter_server_step = self._client.step([g.data_ptr() for g in grads],
                                                               [o.data_ptr() for o in outputs])
                for p, wide in self._wide_grads.items():  # the answers, rounded into the model
                    if self._mode == PS_SYNC:
                        p.grad.copy_(wide)
                    else:
                        p.data.copy_(self._masters[p])
        except HoraInternalError:
            if elastic_place() is not None:
                # The job re-forms with new servers: the old ones that live hear this worker's
                # goodbye now rather than wait for its connection to close.
                self._client.close()
            raise
        finally:
            self._forget_step()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() right after an explicit synchronize(): ps-sync then applies the reduced
        (e.g. clipped) gradients; ps-async has nothing left to do (the servers applied them)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are pushed a second time. Wrap step() "
                              "in `with optimizer.skip_synchronize():` when you call synchronize() yourself.")
            self.synchronize()
        self._synchronized = False
        if self._mode == PS_SYNC:
            super(self.__class__, self).step()
        return loss

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict, forgetting the step in flight (an elastic
        restore after a failed exchange)."""
        self._forget_step()
        self._synchronized = False
        self._should_synchronize = True
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def _forget_step(self):
        """The hooks' count of backward passes and what they handed over start again."""
        self._step_begun = False
        self._handles.clear()
        self._widened.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def close(self):
        """Tells the servers this worker is done (also done at exit)."""
        if self._client is not None:
            self._client.close()


def ps_optimizer(wrap, optimizer, named_parameters, compression, backward_passes_per_step, op, mode, max_staleness):
    """The optimizer of a parameter server mode, or ValueError for what it cannot do yet."""
    if op not in (Average, Sum):
        raise ValueError(f"mode={mode!r} reduces with op=Average or op=Sum only")
    if compression not in (Compression.none, Compression.fp16):
        raise ValueError(f"mode={mode!r} compresses with Compression.fp16 (on the wire) or not at all "
                         f"(Compression.none), not {getattr(compression, '__name__', compression)}")
    server_options = server_optimizer(optimizer) if mode == PS_ASYNC else None
    if server_options:  # at construction, where the warning's line points at the user's code
        warn_of_async_momentum(server_options.get("momentum", 0.0), stacklevel=4)
    return wrap(optimizer, _ParameterServerOptimizer, named_parameters, compression, backward_passes_per_step, op,
                mode, max_staleness, server_options)
