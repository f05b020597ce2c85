"""Horovod's Keras callbacks for the top-level keras package (hvd.callbacks): see
hora/_keras/callbacks.py."""

import keras

from hora._keras import callbacks as _impl

_classes = _impl.make(keras, __name__)
BroadcastGlobalVariablesCallback = _classes.BroadcastGlobalVariablesCallback
MetricAverageCallback = _classes.MetricAverageCallback
LearningRateScheduleCallback = _classes.LearningRateScheduleCallback
LearningRateWarmupCallback = _classes.LearningRateWarmupCallback
BestModelCheckpoint = _classes.BestModelCheckpoint
