"""Parameter servers (docs/parameter_servers.md): a worker's connection to the job's servers,
framework-neutral. A frontend hands it float32 or float64 buffers by address, as requests.py does for the
engine; its users are hora.torch's optimizer (hora/torch/ps_optimizer.py) and hora.keras'
(hora/_keras/ps.py).

The servers are started by `horarun --servers K`, which tells every worker their number
(HORA_PS_SERVERS); the connection itself goes through the job's store and transports. In an
elastic job each generation has servers of its own: a client belongs to the generation it was
made in (stale() once the job re-formed), and the optimizers make a new one then."""

import atexit
import collections
import warnings
import weakref

from hora import _core
from hora.common import basics
from hora.common.identity import identity

# The values of the optimizers' `mode` argument.
ALLREDUCE, PS_SYNC, PS_ASYNC = "allreduce", "ps-sync", "ps-async"
MODES = (ALLREDUCE, PS_SYNC, PS_ASYNC)

# After a step: this worker's steps the servers have applied, the fewest any live worker has had
# applied, and (ps-async) the push's place in the order the first server applied pushes.
PsStep = collections.namedtuple("PsStep", "step slowest version")

_open_clients = weakref.WeakSet()
_warned_of_momentum = False


def check_mode(mode, max_staleness):
    """ValueError for a mode or staleness bound the optimizers do not take."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(repr(m) for m in MODES)}, got {mode!r}")
    if max_staleness is not None:
        if mode != PS_ASYNC:
            raise ValueError(f"max_staleness bounds mode='ps-async' only (mode is {mode!r})")
        if not isinstance(max_staleness, int) or isinstance(max_staleness, bool) or max_staleness < 0:
            raise ValueError(f"max_staleness must be None or an int >= 0, got {max_staleness!r}")


def warn_of_async_momentum(momentum, workers=None, rank=None, stacklevel=3):
    """A warning (once per process, from rank 0) when ps-async with `workers` workers (the job's
    ranks by default) runs with an explicit momentum high enough to compound the momentum that
    asynchrony brings by itself (docs/parameter_servers.md, "ps-async and momentum: why 8 workers
    collapsed"). The frontends call it at every push, so a schedule that raises the momentum later
    is caught too. True when it warned now."""
    global _warned_of_momentum
    if _warned_of_momentum or not momentum:
        return False
    workers = basics.size() if workers is None else workers
    if (basics.rank() if rank is None else rank) != 0:
        return False
    message = _core.async_momentum_warning(int(workers), float(momentum))
    if not message:
        return False
    _warned_of_momentum = True
    warnings.warn(message, stacklevel=stacklevel)
    return True


def check_servers():
    """InvalidArgumentError unless this process is a worker of a job with parameter servers
    (horarun --servers K): for an optimizer that connects only at its first step."""
    _core.ps_job_servers()


def elastic_place():
    """(generation, rank, size) of this worker in an elastic job's current generation, or None
    outside an elastic job: its servers serve that generation only (docs/parameter_servers.md,
    "Servers in an elastic job")."""
    if not _core.is_elastic() or not basics.is_initialized():
        return None
    place = identity()  # cached until the next init: asked once per step
    return place["generation"], place["rank"], place["size"]


class ParameterServerClient:
    """This worker's side: register the tensors (element counts and dtypes) once, then step()."""

    def __init__(self, elements, mode, average=True, max_staleness=None, initial=(), optimizer=None, fp16=False,
                 initial_state=None, dtypes=None):
        """optimizer (ps-async): what the servers apply the pushes with, a dict of "name" ("sgd",
        "adam", "adagrad", "rmsprop", "adamax", "adadelta", "nadam" or "radam"), "lr", "momentum"
        (sgd, rmsprop), "beta1", "beta2" (adam, adamax, nadam, radam), "epsilon" (all but sgd),
        "rho" (rmsprop, adadelta), "centered" (rmsprop), "lr_decay",
        "initial_accumulator_value" (adagrad), "momentum_decay" and "nadam_torch1_form" (nadam:
        torch before 2.0's update), "weight_decay" with "decoupled_weight_decay" (any:
        g + wd p, or p -= lr wd p before the update as AdamW does) and "keras_form" (Keras' form of
        the update rather than torch's). fp16 (Compression.fp16): the pushes, and ps-sync's replies,
        travel as float16; the servers sum and apply in float32. initial_state (ps-async): (step,
        addresses by slot, then by tensor) of the optimizer's state to start from, as
        pull_optimizer_state() gives it; worker 0's is the one the servers take. dtypes: "float32"
        or "float64" by tensor (None: all float32); the servers hold, sum and apply each tensor in
        its dtype, and every buffer of a tensor (gradient, output, parameters, slots) is of it. fp16
        takes float32 tensors only."""
        check_mode(mode, max_staleness)
        if mode == ALLREDUCE:
            raise ValueError("mode 'allreduce' uses no parameter servers")
        self._place = elastic_place()
        self._client = _core.PsClient(list(elements), mode, average=average,
                                      max_staleness=-1 if max_staleness is None else max_staleness,
                                      initial=list(initial), optimizer=dict(optimizer or {}), place=self._place,
                                      fp16=bool(fp16), initial_state=initial_state, dtypes=list(dtypes or ()))
        _open_clients.add(self)

    def stale(self):
        """Whether the elastic job re-formed since this client connected: its servers were those
        of an older generation (stopped by horarun), and this worker may have another rank now."""
        place = elastic_place() if self._place is not None else None
        return place is not None and place != self._place

    @property
    def servers(self):
        return self._client.servers

    @property
    def optimizer_slots(self):
        """How many slots (buffers the size of the parameters) the servers' optimizer keeps, in
        the order pull_optimizer_state() fills them: SGD the velocity; Adam the first and second
        moments; Adagrad the sum of squared gradients; RMSprop the momentum buffer, the mean
        square and, centered, the mean gradient; Adamax the first moment and the infinity norm;
        Adadelta the mean squares of the gradient and of the update; NAdam and RAdam the first and
        second moments. 0 in ps-sync."""
        return self._client.optimizer_slots

    def pull_optimizer_state(self, slots):
        """ps-async, between steps: writes the servers' optimizer state into the buffers (of each tensor's dtype) at
        `slots` (addresses by slot, then by tensor) and returns its step count (the pushes the
        servers applied, after the registered initial state's)."""
        return self._client.pull_optimizer_state([list(slot) for slot in slots])

    def nadam_momentum_product(self, step):
        """NAdam (ps-async): the product of momenta after `step` of the servers' steps (torch's
        mu_product, Keras' _u_product), computed from the step as the servers compute it, with the
        beta1 they apply (lowered by HORA_PS_COMPENSATE_MOMENTUM): it is never sent."""
        return self._client.nadam_momentum_product(int(step))

    def set_sgd(self, lr, momentum=0.0):
        """ps-async: the learning rate (and SGD's or RMSprop's momentum) the servers apply the next pushes with
        (those given at construction until called): a schedule's or a callback's changes."""
        self._client.set_sgd(float(lr), float(momentum))

    def ready(self, tensor, gradient):
        """Tensor number `tensor`'s gradient of the next step is final at address `gradient` (read
        until step() returns): its push begins while the backward pass computes the rest."""
        self._client.ready(tensor, gradient)

    def step(self, gradients, outputs):
        """Pushes the buffers at `gradients` (those not readied yet) and writes the servers' answer
        at `outputs`."""
        return PsStep(*self._client.step(list(gradients), list(outputs)))

    def close(self):
        """Tells the servers this worker is done (they exit once every worker is). Idempotent."""
        self._client.close()
        _open_clients.discard(self)


@atexit.register
def _close_open_clients():
    # A worker that ends without closing would look dead to its servers.
    for client in list(_open_clients):
        try:
            client.close()
        except Exception:  # noqa: BLE001 - leaving anyway; the servers see a closed connection
            pass
