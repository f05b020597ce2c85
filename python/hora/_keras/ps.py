"""DistributedOptimizer(..., mode="ps-sync" | "ps-async") for Keras: gradients travel through the
job's parameter servers (docs/parameter_servers.md) instead of allreduce.

ps-sync: the gradients Keras computed are pushed and replaced by the servers' mean (op=Average)
or sum (op=Sum) over the workers; the wrapped optimizer then applies them as after an allreduce.
ps-async: the gradients are pushed, the servers apply them with their own SGD, Adam, AdamW,
Adagrad, RMSprop, Adamax, Adadelta or Nadam (Keras 3's) (the wrapped optimizer's options, weight decay
included; the learning rate and momentum of that step: a schedule's value, or what a callback
such as LearningRateWarmupCallback set) and answer with their parameters, which are assigned to
the model's variables; the wrapped optimizer's own update does not run. Its slots (momentum,
Adam's moments, ...) hold the servers' state instead: they register it at the first step (a
checkpoint loaded, or an elastic commit restored, is the servers' starting point) and
pull_server_state() writes the servers' state into them (saving the optimizer does that first).

The exchange is a tf.numpy_function, so it runs eagerly and inside the train step Keras traces;
the client connects at the first step, when the variables are known."""

import numpy as np
import tensorflow as tf

import hora.tensorflow as hvd
from hora.tensorflow.util import build_optimizer_slots
from hora._keras.keras_version import keras_generation
from hora.common.exceptions import HoraInternalError
from hora.common.parameter_servers import (PS_ASYNC, PS_SYNC, ParameterServerClient, elastic_place,
                                          warn_of_async_momentum)

_SERVED = ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "Adadelta", "Nadam")


def _is_legacy(optimizer):
    """Keras 2's OptimizerV2 (optimizers.legacy), whose Adagrad and RMSprop run TensorFlow's
    training kernels rather than the formulas of the newer optimizers."""
    return hasattr(optimizer, "_decayed_lr")


def _legacy_momentum_slot(optimizer):
    """Whether a Keras 2 legacy SGD or RMSprop applies momentum at all: it decides once, at
    construction (momentum > 0, or a tensor or callable), and ignores the hyperparameter after if not."""
    return getattr(optimizer, "_momentum", True)


def server_optimizer(optimizer):
    """What the servers apply ps-async pushes with, as ParameterServerClient takes it: a Keras SGD,
    Adam, AdamW, Adagrad, RMSprop, Adamax, Adadelta or Nadam (with its weight_decay), in the form of
    the update it computes (keras_form; Keras 2's legacy Adagrad, and its RMSprop without momentum,
    put epsilon outside the root as torch does), its learning rate as registered (a schedule
    registers 0: every push carries the step's own, sgd_now); ValueError naming the option for
    anything else."""
    config = optimizer.get_config()
    kind = type(optimizer).__name__
    if kind not in _SERVED:
        raise ValueError(f"mode='ps-async' runs {', '.join(_SERVED[:-1])} or {_SERVED[-1]} on the servers, not {kind}")
    if kind == "Nadam" and keras_generation(type(optimizer)) == 2:
        # Keras 2's Nadam (2.11+) multiplies its product of momenta once per variable in a traced
        # step, not once per step, so its update depends on how many variables the model has; its
        # legacy Nadam's schedule_decay is also a decay of the lr. The servers run Keras 3's.
        raise ValueError("mode='ps-async' runs Keras 3's Nadam on the servers, not Keras 2's, whose update depends "
                         "on the model's number of variables (its momentum product advances once per variable)")
    if config.get("nesterov"):
        raise ValueError("mode='ps-async': the servers' SGD has no nesterov; set it to False")
    for key in ("amsgrad", "decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema",
                "gradient_accumulation_steps"):
        if config.get(key):
            raise ValueError(f"mode='ps-async': the servers' {kind} has no {key}; leave it unset")
    excluded = getattr(optimizer, "_exclude_from_weight_decay", None) or \
        getattr(optimizer, "_exclude_from_weight_decay_names", None) or \
        getattr(optimizer, "_exclude_from_weight_decay_pattern", None) is not None
    if excluded and config.get("weight_decay"):  # without a decay, nothing is excluded from it
        raise ValueError(f"mode='ps-async': the servers decay every variable; {kind}.exclude_from_weight_decay() "
                         "cannot be honoured")
    lr = config.get("learning_rate")
    if isinstance(lr, dict) or not np.isscalar(lr):  # a schedule is serialized as a dict
        lr = 0.0
    kind = "Adam" if kind == "AdamW" else kind  # AdamW is Adam with the decoupled weight decay all have
    # Keras' weight_decay (every optimizer but Keras 2's legacy ones): p -= p wd lr before the update.
    options = {"name": kind.lower(), "lr": float(lr), "keras_form": True,
               "weight_decay": float(config.get("weight_decay") or 0.0), "decoupled_weight_decay": True}
    if kind == "SGD":
        options["momentum"] = float(config.get("momentum", 0.0))
    elif kind in ("Adam", "Adamax", "Nadam"):
        options.update(beta1=float(config["beta_1"]), beta2=float(config["beta_2"]), epsilon=float(config["epsilon"]))
        if kind == "Nadam":
            options["momentum_decay"] = 1.0  # Keras' momentum at step t: beta_1 (1 - 0.96^t / 2)
    elif kind == "Adadelta":
        options.update(rho=float(config["rho"]), epsilon=float(config["epsilon"]))
    elif kind == "Adagrad":
        options.update(epsilon=float(config["epsilon"]),
                       initial_accumulator_value=float(config["initial_accumulator_value"]),
                       keras_form=not _is_legacy(optimizer))
    else:
        # Keras 2's legacy RMSprop runs TensorFlow's RMSProp kernel (Keras' form) when it has a
        # momentum slot, else its own update with epsilon outside the root (torch's form).
        momentum = float(config.get("momentum", 0.0))
        slot = not _is_legacy(optimizer) or _legacy_momentum_slot(optimizer)
        options.update(rho=float(config["rho"]), epsilon=float(config["epsilon"]), momentum=momentum if slot else 0.0,
                       centered=bool(config.get("centered", False)), keras_form=slot)
    return options


def sgd_now(optimizer):
    """The learning rate and momentum (SGD's, RMSprop's; 0 for the others) `optimizer` would apply
    at this step, as float32 tensors: a schedule's value at its iterations, or the variable a
    callback sets."""
    moves = type(optimizer).__name__ in ("SGD", "RMSprop")
    if _is_legacy(optimizer):  # Keras 2's OptimizerV2: schedule, decay, hyperparameters as variables
        slot = moves and _legacy_momentum_slot(optimizer)
        momentum = optimizer._get_hyper("momentum", tf.float32) if slot else tf.constant(0.0)
        return optimizer._decayed_lr(tf.float32), momentum
    lr = optimizer._learning_rate
    if callable(lr) and hasattr(lr, "get_config"):  # a LearningRateSchedule
        lr = lr(optimizer.iterations)
    else:
        lr = optimizer.learning_rate  # the variable (Keras 3's property also evaluates schedules)
    return tf.cast(lr, tf.float32), tf.constant(float(optimizer.momentum) if moves else 0.0, tf.float32)


# The servers' slots (ParameterServerClient.optimizer_slots' order) in the wrapped Keras optimizer:
# the list attribute of the 2.11+ and Keras 3 optimizers, and the slot name of Keras 2's legacy ones.
_KERAS_SLOTS = {"sgd": (("momentums", "momentum"),),
                "adam": (("_momentums", "m"), ("_velocities", "v")),
                "adagrad": (("_accumulators", "accumulator"),),
                "rmsprop": (("_momentums", "momentum"), ("_velocities", "rms"), ("_average_gradients", "mg")),
                "adamax": (("_m", "m"), ("_u", "v")),
                "nadam": (("_momentums", "m"), ("_velocities", "v")),
                "adadelta": (("_accumulated_grads", "accum_grad"), ("_accumulated_delta_vars", "accum_var"))}


def slot_variables(optimizer, options, variables):
    """ps-async: the wrapped optimizer's variables that mirror the servers' slots, by slot, then
    by variable of `variables`; None where the optimizer keeps no such slot (SGD or RMSprop
    without momentum, RMSprop not centered), whose servers' slot is not the user's to keep. The
    optimizer's slots are made first if it has none yet."""
    with tf.init_scope():  # Keras makes slots eagerly, even from inside a traced train step
        build_optimizer_slots(optimizer, variables)
    names = _KERAS_SLOTS[options["name"]]
    if options["name"] == "rmsprop" and not options.get("centered"):
        names = names[:2]
    if _is_legacy(optimizer):
        def slot(v, name):
            return optimizer.get_slot(v, name) if name in optimizer.get_slot_names() else None

        return [[slot(v, name) for v in variables] for _, name in names]
    if hasattr(optimizer, "_get_variable_index"):  # Keras 3
        index = [optimizer._get_variable_index(v) for v in variables]
    else:  # Keras 2's 2.11+ optimizers
        index = [optimizer._index_dict[optimizer._var_key(v)] for v in variables]
    slots = [getattr(optimizer, attribute) for attribute, _ in names]
    return [[kept[i] if i < len(kept) else None for i in index] for kept in slots]


def served_dtype(variable, fp16):
    """The dtype the servers hold `variable` in, its own (float32 or float64: Note [element types]
    in src/ps/shard_state.h); ValueError naming it for any other, or for a float64 one with
    Compression.fp16 (float16 would keep 11 of its 53 bits)."""
    dtype = tf.as_dtype(variable.dtype).base_dtype  # Keras 3 names it as a string
    if dtype not in (tf.float32, tf.float64):
        raise ValueError(f"parameter server modes take float32 or float64 variables; {variable.name} is {dtype.name}")
    if fp16 and dtype == tf.float64:
        raise ValueError(f"Compression.fp16 takes float32 variables to the servers; {variable.name} is float64 "
                         "(use Compression.none)")
    return dtype


def dense_gradient(grad, variable, dtype):
    """A gradient as the servers take it: dense, of the variable's dtype (zeros where Keras gave none)."""
    if grad is None:
        return tf.zeros(variable.shape, dtype)
    return tf.convert_to_tensor(grad)


class KerasParameterServers:
    """This worker's exchange with the servers, for one optimizer."""

    def __init__(self, mode, op, max_staleness, optimizer, compression=None):
        self.optimizer = optimizer
        self.mode = mode
        self.fp16 = compression is hvd.Compression.fp16  # on the wire (ParameterServerClient)
        self.average = op == hvd.Average
        self.max_staleness = max_staleness
        self.server_optimizer = server_optimizer(optimizer) if mode == PS_ASYNC else None
        if self.server_optimizer:
            warn_of_async_momentum(self.server_optimizer.get("momentum", 0.0))
        self.client = None
        self.last_step = None  # the last step's PsStep (this worker's step, the slowest, version)
        self.slots = []  # ps-async: slot_variables(), by slot, then by variable
        self.server_step = None  # ps-async: the servers' step count, as last pulled
        self.dtypes = []  # by variable: the numpy dtype it travels and is held in (served_dtype)

    def _connect(self, grads, values, slots, iterations):
        """values, slots (ps-async): the variables' values and the slots' (empty where the optimizer
        keeps none), which worker 0 registers as the servers' starting point."""
        self.elements = [g.size for g in grads]
        initial, initial_state = [], None
        if self.mode == PS_ASYNC:
            # registration overwrites these with the servers' parameters
            initial = [np.array(a, dtype=d) for a, d in zip(values, self.dtypes)]
            slots = [[np.ascontiguousarray(a, dtype=d) if a.size else np.zeros(n, d)
                      for a, n, d in zip(slot, self.elements, self.dtypes)] for slot in slots]
            # Keras keeps one step count, the worker's iterations (which schedules read); the servers
            # count every worker's pushes. Unless pulled, it is what workers that kept step made.
            step = self.server_step if self.server_step is not None else int(iterations) * hvd.size()
            initial_state = (step, [[a.ctypes.data for a in slot] for slot in slots])
        self.client = ParameterServerClient(self.elements, self.mode, average=self.average,
                                            max_staleness=self.max_staleness,
                                            initial=[a.ctypes.data for a in initial], optimizer=self.server_optimizer,
                                            fp16=self.fp16, initial_state=initial_state,
                                            dtypes=[np.dtype(d).name for d in self.dtypes])

    def _exchange(self, *arrays):
        # numpy_function: the gradients, then (async) the variables' values, the slots' (by slot,
        # then by variable), the learning rate, the momentum and the iterations; answers as many
        # arrays as there are gradients.
        n = len(arrays)
        if self.mode == PS_ASYNC:
            *arrays, lr, momentum, iterations = arrays
            n = len(arrays) // (2 + len(self.slots))
        grads = [np.ascontiguousarray(a, dtype=d) for a, d in zip(arrays[:n], self.dtypes)]
        if self.client is not None and self.client.stale():
            self.client.close()  # an elastic job re-formed: the new generation has servers of its own
            self.client = None
        if self.client is None:
            slots = [arrays[2 * n + k * n:2 * n + (k + 1) * n] for k in range(len(self.slots))]
            self._connect(grads, arrays[n:2 * n], slots, iterations if self.mode == PS_ASYNC else 0)
        outputs = [np.empty_like(g) for g in grads]
        if self.mode == PS_ASYNC:
            warn_of_async_momentum(momentum)  # a callback may have raised it
            self.client.set_sgd(lr, momentum)
        try:
            self.last_step = self.client.step([g.ctypes.data for g in grads], [o.ctypes.data for o in outputs])
        except HoraInternalError:
            if elastic_place() is not None:
                # The job re-forms with new servers: the old ones that live hear this worker's
                # goodbye now rather than wait for its connection to close.
                self.client.close()
                self.client = None
            raise
        return outputs

    def _call(self, tensors, variables):
        out = tf.numpy_function(self._exchange, tensors, [tf.as_dtype(d) for d in self.dtypes], stateful=True,
                                name="hora_parameter_servers")
        if not isinstance(out, (list, tuple)):  # one output comes back bare, not in a list
            out = [out]
        return [tf.reshape(o, v.shape) for o, v in zip(out, variables)]

    def reduce(self, grads, variables):
        """ps-sync: the workers' mean (or sum) of `grads`, in their order."""
        variables = list(variables)
        dtypes = [served_dtype(v, self.fp16) for v in variables]
        self.dtypes = [d.as_numpy_dtype for d in dtypes]
        dense = [dense_gradient(g, v, d) for g, v, d in zip(grads, variables, dtypes)]
        return self._call(dense, variables)

    def apply(self, grads, variables):
        """ps-async: pushes `grads` and assigns the servers' parameters to `variables`."""
        variables = list(variables)
        self.slots = slot_variables(self.optimizer, self.server_optimizer, variables)
        dtypes = [served_dtype(v, self.fp16) for v in variables]
        self.dtypes = [d.as_numpy_dtype for d in dtypes]
        dense = [dense_gradient(g, v, d) for g, v, d in zip(grads, variables, dtypes)]
        # Reading a variable shares its buffer: the slots cost nothing until a connection reads them.
        values = [tf.convert_to_tensor(v) for v in variables]
        slots = [tf.zeros([0]) if s is None else tf.convert_to_tensor(s) for slot in self.slots for s in slot]
        iterations = tf.convert_to_tensor(self.optimizer.iterations)
        params = self._call(dense + values + slots + list(sgd_now(self.optimizer)) + [iterations], variables)
        return tf.group(*[v.assign(p) for v, p in zip(variables, params)])

    def pull_state(self):
        """ps-async, eagerly between steps: writes the servers' optimizer state into the optimizer's
        slots and returns their step count (kept as server_step). None before the first step (the
        servers start from the optimizer's own state then), after an elastic job re-formed and
        before its next step (the old servers are gone; the slots hold the restored commit), or in
        ps-sync."""
        if self.client is None or self.mode != PS_ASYNC or self.client.stale():
            return None
        buffers = [[np.empty(n, d) for n, d in zip(self.elements, self.dtypes)] for _ in self.slots]
        self.server_step = self.client.pull_optimizer_state([[b.ctypes.data for b in slot] for slot in buffers])
        for variables, values in zip(self.slots, buffers):
            for variable, value in zip(variables, values):
                if variable is not None:
                    variable.assign(value.reshape(variable.shape))
        if self.server_optimizer["name"] == "nadam":  # the product of momenta is the step's
            self.optimizer._u_product.assign(self.client.nadam_momentum_product(self.server_step))
        return self.server_step

    def close(self):
        if self.client is not None:
            self.client.close()


def check_arguments(mode, compression, gradient_predivide_factor, backward_passes_per_step, groups, process_set):
    """ValueError for the arguments the parameter server modes do not take (yet)."""
    if compression not in (hvd.Compression.none, hvd.Compression.fp16):
        raise ValueError(f"mode={mode!r} compresses with Compression.fp16 (on the wire) or not at all "
                         f"(Compression.none), not {getattr(compression, '__name__', compression)}")
    if gradient_predivide_factor != 1.0 or backward_passes_per_step != 1 or groups is not None \
            or process_set is not hvd.global_process_set:
        raise ValueError(f"mode={mode!r} takes no groups, process_set, gradient_predivide_factor or "
                         "backward_passes_per_step > 1")


__all__ = ["KerasParameterServers", "check_arguments", "PS_SYNC", "PS_ASYNC"]
