"""Horovod's Keras callbacks for tf.keras (hvd.callbacks): see hora/_keras/callbacks.py."""

import tensorflow as tf

from hora._keras import callbacks as _impl

_classes = _impl.make(tf.keras, __name__)
BroadcastGlobalVariablesCallback = _classes.BroadcastGlobalVariablesCallback
MetricAverageCallback = _classes.MetricAverageCallback
LearningRateScheduleCallback = _classes.LearningRateScheduleCallback
LearningRateWarmupCallback = _classes.LearningRateWarmupCallback
BestModelCheckpoint = _classes.BestModelCheckpoint
