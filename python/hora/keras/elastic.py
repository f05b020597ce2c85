"""hvd.elastic for the top-level keras package: see hora.tensorflow.keras.elastic."""

import keras

from hora._keras import elastic as _impl
from hora.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401  (KerasState's base, as in Horovod)

_classes = _impl.make(keras, __name__)
KerasState = _classes.KerasState
CommitStateCallback = _classes.CommitStateCallback
UpdateBatchStateCallback = _classes.UpdateBatchStateCallback
UpdateEpochStateCallback = _classes.UpdateEpochStateCallback

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
