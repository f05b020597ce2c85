"""The Keras callbacks of hora.tensorflow.keras and hora.keras, written once for both Keras
generations: make(keras) returns them as subclasses of that Keras's Callback.

Keras 3 has no backend.get_value/set_value and no optimizer.lr, so the learning rate and the
momentum are read and assigned through optimizer.learning_rate / optimizer.momentum, which are
variables in both generations when they can change during training.
"""

import types
import warnings

import tensorflow as tf

import hora.tensorflow as hvd
from hora._keras.keras_version import is_variable, optimizer_variables, to_float, variable_key


class BroadcastGlobalVariablesCallbackImpl:
    """Gives every rank rank `root_rank`'s model and optimizer variables, so that all start
    alike whether the weights are random or restored from a checkpoint (`device` is taken for
    compatibility with Horovod and ignored; `local_variables`, a variable or a collection, are
    left alone on each rank).

    The broadcast happens at the end of the first batch, not at the start of training: the
    optimizer creates its slot variables (momentum, Adam's moments) lazily, on its first step.
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_vars = set()
        if local_variables is None:
            local_variables = []
        elif is_variable(local_variables):
            local_variables = [local_variables]
        elif not all(is_variable(v) for v in local_variables):
            raise ValueError("All local variables must be of tf.Variable type.")
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """Registers a variable as worker local: it is not broadcast."""
        self._local_vars.add(variable_key(var))

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        model_vars = [v for v in self.model.variables if variable_key(v) not in self._local_vars]
        hvd.broadcast_variables(model_vars, root_rank=self.root_rank)
        hvd.broadcast_variables(optimizer_variables(self.model.optimizer), root_rank=self.root_rank)
        self.broadcast_done = True


class MetricAverageCallbackImpl:
    """At the end of each epoch, replaces every metric in `logs` by its mean over the ranks, so
    that what later callbacks read (ReduceLROnPlateau, EarlyStopping, TensorBoard, a checkpoint's
    monitor) is the job's figure, the same on every rank: list it before them. `device` is taken
    for compatibility with Horovod and ignored.
    """

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def _average_metrics_in_place(self, logs):
        # Sorted, so that every rank reduces the same metric in the same allreduce.
        for metric, value in sorted((logs or {}).items()):
            averaged = hvd.allreduce(tf.constant(value, name=metric), op=hvd.Average,
                                     name=f"MetricAverageCallback.{metric}")
            logs[metric] = averaged.numpy()

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


class LearningRateScheduleCallbackImpl:
    """From epoch `start_epoch` up to (not including) `end_epoch` (None: to the end), sets the
    optimizer's learning rate to `initial_lr` times `multiplier`, a number or a function of the
    epoch. With `staircase` (the default) the function is called with the whole epoch number at
    each epoch's start; without it, at each batch's start with a fractional epoch
    (epoch + batch / steps_per_epoch), for smooth schedules such as the warmup. `steps_per_epoch`
    is found from fit()'s parameters when not given. `momentum_correction` scales the momentum by
    the change of the rate for the step that changes it (Goyal et al.).

    The optimizer's learning rate must be a number (held in a variable), not a
    LearningRateSchedule. Momentum correction needs the momentum in a variable too, as the
    legacy Keras 2 optimizers hold it; where it is a plain number (the Keras 2.11+ and Keras 3
    optimizers) the traced train step has it built in, and the correction is skipped with a
    warning.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.restore_momentum = None
        self.current_epoch = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            # A constant multiplier is an exponential decay.
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)
        self._warned_momentum = False

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify the steps_per_epoch "
                         f"parameter to the {type(self).__name__}().")

    def _settable_momentum(self):
        momentum = getattr(self.model.optimizer, "momentum", None)
        if momentum is None or not self.momentum_correction:
            return None
        if is_variable(momentum):
            return momentum
        if not self._warned_momentum and momentum:
            warnings.warn(f"{type(self).__name__}: the optimizer's momentum is a number, which the compiled train "
                          "step has built in; momentum correction is skipped (it needs an optimizer whose momentum "
                          "is a variable, such as tf.keras.optimizers.legacy.SGD in Keras 2)")
            self._warned_momentum = True
        return None

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = to_float(optimizer.learning_rate)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        momentum = self._settable_momentum()
        if momentum is not None and old_lr != 0:
            # Goyal et al. (2017), section 2.1: scale the momentum with the change of learning
            # rate for this one step, so that the update keeps its size.
            self.restore_momentum = to_float(momentum)
            momentum.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self._settable_momentum().assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (self.end_epoch is not None
                                                     and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = to_float(self.model.optimizer.learning_rate)


class LearningRateWarmupCallbackImpl(LearningRateScheduleCallbackImpl):
    """Raises the learning rate linearly from `initial_lr` / size to `initial_lr` over the first
    `warmup_epochs` epochs (default 5), batch by batch: the warmup of Goyal et al., "Accurate,
    Large Minibatch SGD" (arXiv:1706.02677), for the large global batch of many ranks.
    At fractional epoch e it is initial_lr / size * (e * (size - 1) / warmup_epochs + 1).
    `momentum_correction` and `steps_per_epoch` are as for LearningRateScheduleCallback;
    `verbose=1` prints the rate when the warmup ends.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # The rate a batch ends with rather than the one it starts with, so that the last
            # batch of the warmup reaches initial_lr exactly (and logged rates are round).
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / hvd.size() * (epoch * (hvd.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and hvd.rank() == 0:
            new_lr = to_float(self.model.optimizer.learning_rate)
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {new_lr:g}.")


class BestModelCheckpointImpl:
    """A ModelCheckpoint that keeps the best model only (save_best_only=True), whose file path
    is set later, through its `filepath` attribute (as Horovod's Spark estimator does)."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto", save_freq="epoch"):
        # Keras 3 checks the path's extension when the callback is made; the real path is set
        # before training, and checked then.
        placeholder = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=placeholder, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = None

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("BestModelCheckpoint: set its `filepath` attribute before training")
        super().on_train_begin(logs)


def _subclass(impl, base, module):
    name = impl.__name__[:-len("Impl")]
    return type(name, (impl, base), {"__module__": module, "__qualname__": name, "__doc__": impl.__doc__})


def make(keras, module):
    """The callbacks as classes of `keras` (tf.keras, keras or tf_keras), named as in Horovod
    and shown as members of `module`."""
    callback = keras.callbacks.Callback
    return types.SimpleNamespace(
        BroadcastGlobalVariablesCallback=_subclass(BroadcastGlobalVariablesCallbackImpl, callback, module),
        MetricAverageCallback=_subclass(MetricAverageCallbackImpl, callback, module),
        LearningRateScheduleCallback=_subclass(LearningRateScheduleCallbackImpl, callback, module),
        LearningRateWarmupCallback=_subclass(LearningRateWarmupCallbackImpl, callback, module),
        BestModelCheckpoint=_subclass(BestModelCheckpointImpl, keras.callbacks.ModelCheckpoint, module),
    )
