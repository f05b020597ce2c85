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
    """Keras Callback that will broadcast all global variables from root rank
    to all other processes during initialization.

    This is necessary to ensure consistent initialization of all workers when
    training is started with random weights or restored from a checkpoint.

    The broadcast happens at the end of the first batch, not at the start of training: the
    optimizer creates its slot variables (momentum, Adam's moments) lazily, on its first step.
    """

    def __init__(self, root_rank, device="", local_variables=None):
        """Construct a new BroadcastGlobalVariablesCallback that will broadcast all
        global variables from root rank to all other processes during initialization.

        Args:
            root_rank: Rank that will send data, other ranks will receive data.
            device: Accepted for compatibility with Horovod; hora broadcasts on the CPU.
            local_variables: A variable or collection of variables that need not be broadcast.
        """
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
    """Keras Callback that will average metrics across all processes at the
    end of the epoch. Useful in conjuction with ReduceLROnPlateau,
    TensorBoard and other metrics-based callbacks.

    Note: This callback must be added to the callback list before the
    ReduceLROnPlateau, TensorBoard or other metrics-based callbacks.
    """

    def __init__(self, device=""):
        """Construct a new MetricAverageCallback that will average metrics
        across all processes at the end of the epoch.

        Args:
            device: Accepted for compatibility with Horovod; hora averages on the CPU.
        """
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
    """LearningRateScheduleCallback sets learning rate between epochs `start_epoch` and
    `end_epoch` to be `initial_lr * multiplier`.  `multiplier` can be a constant or
    a function `f(epoch) = lr'`.

    If `multiplier` is a function and `staircase=True`, learning rate adjustment will
    happen at the beginning of each epoch and the epoch passed to the `multiplier`
    function will be an integer.

    If `multiplier` is a function and `staircase=False`, learning rate adjustment will
    happen at the beginning of each batch and the epoch passed to the `multiplier`
    function will be a floating number: `epoch' = epoch + batch / steps_per_epoch`.
    This functionality is useful for smooth learning rate adjustment schedulers, such
    as `LearningRateWarmupCallback`.

    `initial_lr` is the learning rate of the model optimizer at the start of the training.

    The optimizer's learning rate must be a number (held in a variable), not a
    LearningRateSchedule. Momentum correction needs the momentum in a variable too, as the
    legacy Keras 2 optimizers hold it; where it is a plain number (the Keras 2.11+ and Keras 3
    optimizers) the traced train step has it built in, and the correction is skipped with a
    warning.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        """Construct a new LearningRateScheduleCallback.

        Args:
            initial_lr: Initial learning rate at the start of training.
            multiplier: A constant multiplier or a function `f(epoch) = lr'`
            start_epoch: The first epoch this adjustment will be applied to. Defaults to 0.
            end_epoch: The epoch this adjustment will stop applying (exclusive end).
                       Defaults to None.
            staircase: Whether to adjust learning rate at the start of epoch (`staircase=True`)
                       or at the start of every batch (`staircase=False`).
            momentum_correction: Apply momentum correction to optimizers that have momentum.
                                 Defaults to True.
            steps_per_epoch: The callback will attempt to autodetect number of batches per
                             epoch. Provide this value if it cannot.
        """
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
    """Implements gradual learning rate warmup:

        `lr = initial_lr / hvd.size()` ---> `lr = initial_lr`

    `initial_lr` is the learning rate of the model optimizer at the start of the training.

    This technique was described in the paper "Accurate, Large Minibatch SGD: Training
    ImageNet in 1 Hour". See https://arxiv.org/pdf/1706.02677.pdf for details.

    Math recap:

    .. math::

        epoch &= full\\_epochs + \\frac{batch}{steps\\_per\\_epoch}

        lr'(epoch) &= \\frac{lr}{size} * (\\frac{size - 1}{warmup} * epoch + 1)

        lr'(epoch = 0) &= \\frac{lr}{size}

        lr'(epoch = warmup) &= lr
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        """Construct a new LearningRateWarmupCallback that will gradually warm up the learning rate.

        Args:
            initial_lr: Initial learning rate at the start of training.
            warmup_epochs: The number of epochs of the warmup phase. Defaults to 5.
            momentum_correction: Apply momentum correction to optimizers that have momentum.
                                 Defaults to True.
            steps_per_epoch: The callback will attempt to autodetect number of batches per
                             epoch. Provide this value if it cannot.
            verbose: verbosity mode, 0 or 1.
        """
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
