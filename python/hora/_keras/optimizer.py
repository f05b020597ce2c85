"""DistributedOptimizer for Keras 2 and Keras 3 (hvd.DistributedOptimizer in hora.tensorflow.keras
and hora.keras).

Note [the wrapped class]: as Horovod does, the result is a new instance of a subclass of the
wrapped optimizer's class, made from the wrapped optimizer's get_config(). The subclass has the
same name and module as the wrapped class, so Keras serializes it exactly as the wrapped
optimizer ("SGD" of keras.optimizers) and a saved model loads again without hora. It follows
that only what get_config() holds carries over: hyper-parameters, not slots or iterations.

Where the gradients are reduced depends on what model.fit calls (keras_version.py):
- Keras 2: minimize() -> compute_gradients() (the 2.11+ optimizers) or _compute_gradients()
  (the legacy OptimizerV2 ones, and get_gradients() in graph mode); hora reduces the gradients
  these return, exactly where Horovod does. apply_gradients() itself does not reduce, so a custom
  loop pairs it with a DistributedGradientTape, as with Horovod.
- Keras 3: the train step calls apply_gradients() -> apply() with gradients it computed itself,
  so Horovod's hooks never run there; hora reduces in apply(), the one method every Keras 3
  update goes through.
"""


import warnings

import tensorflow as tf

import hora.tensorflow as hvd
from hora.common.parameter_servers import ALLREDUCE, PS_ASYNC, PS_SYNC, check_mode
from hora.tensorflow.gradient_aggregation import LocalAggregator
from hora.tensorflow.util import _executing_eagerly
from hora._keras import ps as _ps
from hora._keras.gradients import GradientReducer
from hora._keras.keras_version import keras_generation


class CallableList(list):
    """The optimizer's variables, usable both as Keras 2.11+ and Keras 3 do (a property,
    `opt.variables`) and as older code does (`opt.variables()`)."""

    def __call__(self):
        return self


class _Settings:
    """DistributedOptimizer's arguments, attached to the class that create() makes: Keras builds
    instances through from_config(), which passes the wrapped optimizer's arguments only."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _DistributedBase:
    """What the distributed optimizer adds in both Keras generations. It comes first in the
    made class's bases, so super() reaches the wrapped optimizer's class."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        s = self._hora_settings
        self._hora_reducer = GradientReducer(s.name or "Distributed" + type(self).__name__, s.compression,
                                             s.sparse_as_dense, s.op, s.gradient_predivide_factor, s.groups,
                                             s.process_set, s.scale_local_gradients)
        self._hora_aggregator = None
        # mode="ps-sync"/"ps-async": the job's parameter servers instead of the reducer.
        self._hora_ps = None if s.mode == ALLREDUCE else _ps.KerasParameterServers(s.mode, s.op, s.max_staleness, self,
                                                                                    s.compression)
        if s.backward_passes_per_step > 1:
            self._hora_aggregator = LocalAggregator(s.backward_passes_per_step, s.average_aggregated_gradients,
                                                    self._hora_reducer, s.sparse_as_dense)

    @property
    def process_set(self):
        return self._hora_settings.process_set

    @property
    def _agg_helper(self):
        """Horovod's name for the local gradient aggregation (None unless backward_passes_per_step
        > 1), which code written for Horovod reads (its `counter`: passes since the last reduction)."""
        return self._hora_aggregator

    @property
    def variables(self):
        base = super().variables
        return CallableList(base() if callable(base) else base)

    @property
    def parameter_server_step(self):
        """In a parameter server mode, the last step's PsStep (step, slowest, version), else None."""
        return None if self._hora_ps is None else self._hora_ps.last_step

    def pull_server_state(self):
        """ps-async: writes the servers' optimizer state (momentum, Adam's moments, ...) into this
        optimizer's own slots, so that a checkpoint holds it; a round trip to every server. Saving
        the optimizer (model.save, save_weights, ModelCheckpoint, tf.train.Checkpoint) and an
        elastic commit call it. Call it eagerly, between steps. Returns the servers' step count
        (the pushes they applied, every worker's), or None where nothing was pulled: before the
        first step (the servers start from this optimizer's state then), between an elastic
        re-form and the next step, and in other modes."""
        if self._hora_ps is not None and _executing_eagerly():
            return self._hora_ps.pull_state()
        return None

    def _trackable_children(self, *args, **kwargs):
        # tf.train.Checkpoint and TensorFlow-format save_weights list the optimizer's variables here.
        self.pull_server_state()
        return super()._trackable_children(*args, **kwargs)

    def register_local_var(self, var):
        """Registers a variable as worker-local: its gradient is not reduced across ranks (and,
        with scale_local_gradients, is divided by the size instead)."""
        if self._hora_ps is not None:
            raise ValueError(f"mode={self._hora_settings.mode!r} has no worker-local variables yet")
        self._hora_reducer.register_local_var(var)

    def _hora_async(self):
        return self._hora_ps is not None and self._hora_ps.mode == PS_ASYNC

    def _hora_apply_on_servers(self, grads, variables):
        """ps-async: the servers apply the gradients; the variables take their parameters."""
        update = self._hora_ps.apply(grads, variables)
        with tf.control_dependencies([update]):
            return self.iterations.assign_add(1)

    def _hora_gradients(self, grads, variables):
        """The gradients this step applies: reduced now, or summed locally first when
        backward_passes_per_step > 1. In ps-async, as computed (the servers apply them)."""
        if self._hora_ps is not None:
            return self._hora_ps.reduce(grads, variables) if self._hora_ps.mode == PS_SYNC else list(grads)
        if self._hora_aggregator is not None:
            return self._hora_aggregator.gradients(grads, variables)
        return self._hora_reducer(grads, variables)


class _Keras2Hooks(_DistributedBase):
    """Keras 2: reduce what the gradient-computing methods return. Each optimizer family has
    some of them and none calls another, so no gradient is reduced twice: compute_gradients
    (2.11+), _compute_gradients and get_gradients (legacy OptimizerV2)."""

    def compute_gradients(self, loss, var_list, tape=None):
        return self._hora_reduce_pairs(super().compute_gradients(loss, var_list, tape))

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        # Horovod offers this one on every Keras 2 optimizer, and code written for it calls it on
        # the 2.11+ optimizers too, whose own method is compute_gradients (without grad_loss).
        base = super()
        if not hasattr(base, "_compute_gradients"):
            return self._hora_reduce_pairs(base.compute_gradients(loss, var_list, tape))
        return self._hora_reduce_pairs(base._compute_gradients(loss, var_list, grad_loss, tape))

    def get_gradients(self, loss, params):
        return self._hora_gradients(super().get_gradients(loss, params), params)

    def _hora_reduce_pairs(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        return list(zip(self._hora_gradients(grads, variables), variables))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if self._hora_async():
            grads, variables = zip(*grads_and_vars)
            return self._hora_apply_on_servers(grads, variables)
        if self._hora_aggregator is None:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        grads_and_vars = list(grads_and_vars)  # a zip is read by both branches below
        self._hora_aggregator.apply(lambda: super(_Keras2Hooks, self).apply_gradients(grads_and_vars, *args, **kwargs),
                                    lambda: self.iterations.assign_add(1))
        return self.iterations


class _Keras3Hooks(_DistributedBase):
    """Keras 3: reduce in apply(), which apply_gradients() and the train step go through."""

    def apply(self, grads, trainable_variables=None):
        # Without variables, Keras 3 applies to the ones the optimizer was built with.
        variables = list(trainable_variables) if trainable_variables is not None else self._trainable_variables
        if self._hora_async():
            self._hora_apply_on_servers(list(grads), variables)
            return
        grads = self._hora_gradients(grads, variables)
        if self._hora_aggregator is None:
            return super().apply(grads, trainable_variables)
        if not self.built:
            self.build(variables)  # outside the tf.cond below: slots are made once, not per branch
        self._hora_aggregator.apply(lambda: super(_Keras3Hooks, self).apply(grads, variables),
                                    lambda: self.iterations.assign_add(1))


class _PullsBeforeSaving:
    """For optimizers Keras' .keras and .weights.h5 saving (2.12+ and 3) asks for their variables
    (Keras 2's legacy ones have no save_own_variables, which this must not add)."""

    def save_own_variables(self, store):
        self.pull_server_state()
        super().save_own_variables(store)


def _hooks_for(optimizer_class):
    return _Keras3Hooks if keras_generation(optimizer_class) >= 3 else _Keras2Hooks


def create(optimizer, **settings):
    """A distributed copy of `optimizer` (see Note [the wrapped class])."""
    if hasattr(optimizer, "_hora_settings"):
        raise ValueError("this optimizer is already a hora DistributedOptimizer")
    base = type(optimizer)
    saving = (_PullsBeforeSaving,) if hasattr(base, "save_own_variables") else ()
    cls = type(base.__name__, (_hooks_for(base),) + saving + (base,),
               {"__module__": base.__module__, "__qualname__": base.__qualname__, "__doc__": base.__doc__,
                "_hora_settings": _Settings(**settings)})
    config = optimizer.get_config()
    schedule = getattr(optimizer, "_hyper", {}).get("learning_rate")
    if isinstance(config.get("learning_rate"), dict) and hasattr(schedule, "get_config"):
        # Keras 2's legacy Adagrad.from_config hands a serialized schedule to the constructor as it
        # is (the other optimizers deserialize it first): hand it the schedule itself.
        config["learning_rate"] = schedule
    return cls.from_config(config)


def check_op(op):
    if op != hvd.Average and op != hvd.Sum:
        raise ValueError("op currently only supports Average and Sum")


def check_groups(groups):
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of tf.Variable.")


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=hvd.Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=hvd.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=hvd.global_process_set, scale_local_gradients=True,
                         mode=ALLREDUCE, max_staleness=None):
    """Wraps a Keras optimizer so that every rank applies the same gradients: each gradient is
    reduced across the ranks (averaged by default) before the wrapped optimizer applies it.

    The result is an instance of a subclass of the optimizer's class, with the same name and
    configuration: pass it to model.compile() in place of the original, and a model saved with
    it loads again without hora. Works with Keras 2 (TensorFlow <= 2.15, or tf_keras) and
    Keras 3 (the tf.keras of TensorFlow >= 2.16).

    Args:
        optimizer: the Keras optimizer to wrap (scale its learning rate by hvd.size()).
        name: a name for the wrapped optimizer's operations; by default "Distributed" and the
            wrapped optimizer's class name.
        device_dense, device_sparse: taken for compatibility with Horovod and ignored: hora
            reduces on the CPU.
        compression: Compression.none (default) or Compression.fp16, which sends floating-point
            gradients as float16 and restores their type after the reduction.
        sparse_as_dense: reduce IndexedSlices gradients (embeddings) as dense tensors, which is
            cheaper when most rows are touched anyway.
        gradient_predivide_factor: with op=Average, divide each gradient by this factor before
            the sum and by size / factor after it (1.0: all after), to keep float16 sums in range.
        op: Average (default) or Sum.
        backward_passes_per_step: reduce only every N-th call, applying the gradients summed
            locally over the N batches in between (gradient accumulation).
        average_aggregated_gradients: with backward_passes_per_step > 1, divide the accumulated
            gradients by N before they are reduced.
        num_groups: deprecated spelling of an integer `groups`.
        groups: how gradients are fused: an integer N splits them into N grouped reductions;
            a list of lists of variables puts each list's gradients in one group (variables in
            no list get a group each); None leaves fusion to the engine.
        process_set: reduce over the ranks of this ProcessSet only (default: every rank).
        scale_local_gradients: divide the gradients of variables registered as worker-local
            (register_local_var) by the size, as the reduced ones are averaged (default True).
        mode: how gradients travel: "allreduce" (the default), or through the job's parameter
            servers (horarun --servers K; docs/parameter_servers.md): "ps-sync" (the servers sum,
            every worker gets the same mean: allreduce's result) or "ps-async" (the servers apply
            each worker's gradients at once with Keras' SGD, Adam, Adagrad or RMSprop, at the
            learning rate of that step, and the worker takes their parameters). float32 or float64
            variables (the servers hold each in its own type).
        max_staleness: with "ps-async", no worker runs more than this many steps ahead of the
            slowest (None: no bound).
    """
    check_op(op)
    check_mode(mode, max_staleness)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    check_groups(groups)
    if mode != ALLREDUCE:
        _ps.check_arguments(mode, compression, gradient_predivide_factor, backward_passes_per_step, groups,
                            process_set)
        if mode == PS_ASYNC:
            _ps.server_optimizer(optimizer)  # refused now rather than at the first step
    return create(optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                  gradient_predivide_factor=gradient_predivide_factor, op=op,
                  backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients, groups=groups,
                  process_set=process_set, scale_local_gradients=scale_local_gradients, mode=mode,
                  max_staleness=max_staleness)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=hvd.Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=hvd.Average, backward_passes_per_step=1,
                                average_aggregated_gradients=False, groups=None,
                                process_set=hvd.global_process_set, local_layers=None, scale_local_gradients=True):
    """A DistributedOptimizer whose `local_layers` (a Keras layer or a collection of them) keep
    their own weights on every rank: their gradients are not reduced across the ranks (and are
    divided by the size when scale_local_gradients is True). Without local_layers it is the same
    as DistributedOptimizer, whose arguments the others are.
    """
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple, set)):
        local_layers = [local_layers]
    if not all(hasattr(layer, "trainable_weights") for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    distributed = DistributedOptimizer(optimizer, name=name, compression=compression,
                                       sparse_as_dense=sparse_as_dense,
                                       gradient_predivide_factor=gradient_predivide_factor, op=op,
                                       backward_passes_per_step=backward_passes_per_step,
                                       average_aggregated_gradients=average_aggregated_gradients, groups=groups,
                                       process_set=process_set, scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            distributed.register_local_var(var)
    return distributed
