"""The Keras side of elastic training (hvd.elastic in hora.tensorflow.keras and hora.keras):
callbacks that commit the state and keep its epoch and batch current, so that after a reset
model.fit resumes where the last commit left it. make(keras) returns them as subclasses of that
Keras's Callback, as callbacks.make does."""

import types

from hora._keras.callbacks import _subclass
from hora.tensorflow.elastic import TensorFlowKerasState


class CommitStateCallbackImpl:
    """Keras Callback that will commit the `state` object every `batches_per_commit`
    batches at the end of each batch.
    """

    def __init__(self, state, batches_per_commit=1):
        """Constructs a new CommitStateCallback.

        Args:
            state: `hvd.elastic.State` object to be committed.
            batches_per_commit: Number of batches to complete between each commit (default: 1).
        """
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        # Every rank starts counting afresh after a reset, so that all commit at the same batch.
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallbackImpl:
    """Keras Callback that will update the value of `state.batch` with the current batch number at
    the end of each batch. Batch will reset to 0 at the end of each epoch.

    If `steps_per_epoch` is set, then this callback will also ensure that the number of steps
    in the first epoch following a reset is shortened by the number of batches already processed.
    """

    def __init__(self, state):
        """Constructs a new UpdateBatchStateCallback.

        Args:
            state: `hvd.elastic.State` object to be updated.
        """
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallbackImpl:
    """Keras Callback that will update the value of `state.epoch` with the current epoch number at
    the end of each epoch.
    """

    def __init__(self, state):
        """Constructs a new UpdateEpochStateCallback.

        Args:
            state: `hvd.elastic.State` object to be updated.
        """
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        # Keras counts epochs from 0 in every fit; the state counts across resets.
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        # + 1: after a reset that follows this epoch's end, training resumes with the next one.
        self.state.epoch = self.initial_epoch + epoch + 1


def _keras_state(keras, module):
    def __init__(self, model, optimizer=None, **kwargs):
        TensorFlowKerasState.__init__(self, model, optimizer=optimizer, backend=keras.backend, **kwargs)

    doc = f"""State representation of a `{keras.__name__.split('.')[0]}` model and optimizer.

    Args:
        model: Keras model.
        optimizer: Optional optimizer, can be compiled into model instead.
        kwargs: Additional properties to sync, will be exposed as attributes of the object.
    """
    return type("KerasState", (TensorFlowKerasState,),
                {"__init__": __init__, "__doc__": doc, "__module__": module, "__qualname__": "KerasState"})


def make(keras, module):
    """KerasState and the callbacks, for `keras` (tf.keras, keras or tf_keras)."""
    callback = keras.callbacks.Callback
    return types.SimpleNamespace(
        KerasState=_keras_state(keras, module),
        CommitStateCallback=_subclass(CommitStateCallbackImpl, callback, module),
        UpdateBatchStateCallback=_subclass(UpdateBatchStateCallbackImpl, callback, module),
        UpdateEpochStateCallback=_subclass(UpdateEpochStateCallbackImpl, callback, module),
    )
