"""hvd.elastic for tf.keras: Horovod's elastic Keras API (see hora/_keras/elastic.py).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(data, steps_per_epoch=steps, epochs=epochs - state.epoch,
                  callbacks=[hvd.elastic.CommitStateCallback(state),
                             hvd.elastic.UpdateBatchStateCallback(state),
                             hvd.elastic.UpdateEpochStateCallback(state)])

    train(state)
"""

import tensorflow as tf

from hora._keras import elastic as _impl
from hora.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401  (KerasState's base, as in Horovod)

_classes = _impl.make(tf.keras, __name__)
KerasState = _classes.KerasState
CommitStateCallback = _classes.CommitStateCallback
UpdateBatchStateCallback = _classes.UpdateBatchStateCallback
UpdateEpochStateCallback = _classes.UpdateEpochStateCallback

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
