"""The Keras side of elastic training (hvd.elastic in hora.tensorflow.keras and hora.keras):
callbacks that commit the state and keep its epoch and batch current, so that after a reset
model.fit resumes where the last commit left it. make(keras) returns them as subclasses of that
Keras's Callback, as callbacks.make does."""

import types

from hora._keras.callbacks import _subclass
from hora.tensorflow.elastic import TensorFlowKerasState


class CommitStateCallbackImpl:
    """Commits `state` (hvd.elastic.State) after every `batches_per_commit` batches (default 1),
    so that a reset loses at most that many batches."""

    def __init__(self, state, batches_per_commit=1):
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
    """Keeps `state.batch` at the number of batches done in the current epoch (0 again when an
    epoch ends). After a reset it lowers the `steps` parameter of the epoch it resumes by the
    batches already done."""

    def __init__(self, state):
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
    """Keeps `state.epoch` at the number of the next epoch to train, counted from the epoch the
    state held when training (re)started."""

    def __init__(self, state):
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

    doc = f"""The elastic state of a `{keras.__name__.split('.')[0]}` model: its variables and its
    optimizer's (`optimizer`, or the one compiled into the model) are saved at each commit,
    restored after a failure and broadcast from rank 0 when the job re-forms; each keyword
    argument becomes an attribute kept and synced the same way (epoch=0, batch=0, ...).
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
