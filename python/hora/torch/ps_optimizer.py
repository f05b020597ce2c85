"""DistributedOptimizer(..., mode="ps-sync" | "ps-async"): gradients travel through the job's
parameter servers (docs/parameter_servers.md) instead of allreduce.

ps-sync: step() pushes every gradient, the servers answer with the mean (op=Average) or sum
(op=Sum) over the workers, written back into .grad, and the wrapped optimizer steps as after an
allreduce. ps-async: step() pushes the gradients, the servers apply them with their own SGD (the
wrapped optimizer's lr and momentum at that step, so that a scheduler's changes reach them) and
answer with their parameters, which are copied into the model; the wrapped optimizer's own step
does not run.

The push happens in step(), after the backward pass: no overlap with it yet."""

import torch

from hora.common.ops import Average, Sum
from hora.common.parameter_servers import PS_ASYNC, PS_SYNC, ParameterServerClient
from hora.torch.compression import Compression
from hora.torch.hooked_optimizer import HookedOptimizer


def server_sgd_options(optimizer):
    """(lr, momentum) of an optimizer the servers can run; ValueError for any other."""
    if not isinstance(optimizer, torch.optim.SGD):
        raise ValueError(f"mode='ps-async' runs SGD on the servers: wrap a torch.optim.SGD, not "
                         f"{type(optimizer).__name__}")
    groups = optimizer.param_groups
    for key, neutral in (("dampening", 0), ("weight_decay", 0), ("nesterov", False)):
        if any(g.get(key, neutral) != neutral for g in groups):
            raise ValueError(f"mode='ps-async': the servers' SGD has no {key}; set it to {neutral!r}")
    lr, momentum = groups[0]["lr"], groups[0].get("momentum", 0)
    if any(g["lr"] != lr or g.get("momentum", 0) != momentum for g in groups):
        raise ValueError("mode='ps-async': every param group must have the same lr and momentum")
    return float(lr), float(momentum)


class _ParameterServerOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op, mode, max_staleness,
                 server_options):
        all_params = self._wrap_parameters(params, named_parameters, compression, backward_passes_per_step,
                                           "ps")
        self._mode = mode
        self._params = [p for p in all_params if p.requires_grad]
        for p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"mode={mode!r} takes float32 CPU parameters; "
                                 f"{self._parameter_names[p]} is {p.dtype} on {p.device}")
            if not p.data.is_contiguous():
                p.data = p.data.contiguous()
        lr, momentum = server_options if mode == PS_ASYNC else (0.0, 0.0)
        self.parameter_server_step = None  # the last step's PsStep
        self._client = ParameterServerClient(
            [p.numel() for p in self._params], mode, average=(op == Average), max_staleness=max_staleness,
            lr=lr, momentum=momentum,
            # ps-async: every worker starts from the servers' parameters (worker 0's).
            initial=[p.data.data_ptr() for p in self._params] if mode == PS_ASYNC else ())

    def synchronize(self):
        """Pushes the gradients and takes in the servers' answer (step() calls it)."""
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p.data)
            elif p.grad.is_sparse:
                p.grad = p.grad.to_dense()
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            grads.append(p.grad)
        outputs = grads if self._mode == PS_SYNC else [p.data for p in self._params]
        if self._mode == PS_ASYNC:
            self._client.set_sgd(*server_sgd_options(self))  # this step's, as a scheduler left them
        with torch.no_grad():
            self.parameter_server_step = self._client.step([g.data_ptr() for g in grads],
                                                           [o.data_ptr() for o in outputs])

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self.synchronize()
        if self._mode == PS_SYNC:
            super(self.__class__, self).step()
        return loss

    def close(self):
        """Tells the servers this worker is done (also done at exit)."""
        self._client.close()

    def _make_hook(self, p):  # no hooks: the push happens in step()
        raise AssertionError("not used")


def ps_optimizer(wrap, optimizer, named_parameters, compression, backward_passes_per_step, op, mode, max_staleness):
    """The optimizer of a parameter server mode, or ValueError for what it cannot do yet."""
    if op not in (Average, Sum):
        raise ValueError(f"mode={mode!r} reduces with op=Average or op=Sum only")
    if compression is not Compression.none:
        raise ValueError(f"mode={mode!r} does not compress gradients yet: use compression=Compression.none")
    server_options = server_sgd_options(optimizer) if mode == PS_ASYNC else None
    return wrap(optimizer, _ParameterServerOptimizer, named_parameters, compression, backward_passes_per_step, op,
                mode, max_staleness, server_options)
