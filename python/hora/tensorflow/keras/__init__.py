"""hora.tensorflow.keras: a drop-in for horovod.tensorflow.keras (`import hora.tensorflow.keras as
hvd`), for the Keras that `tf.keras` is: Keras 2 with TensorFlow <= 2.15 (or tf_keras with
TF_USE_LEGACY_KERAS=1), Keras 3 with TensorFlow >= 2.16.

    hvd.init()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=..., metrics=[...])
    model.fit(data, steps_per_epoch=steps // hvd.size(), verbose=1 if hvd.rank() == 0 else 0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback()])
"""

import tensorflow as tf

from hora.tensorflow import (Average, Compression, ProcessSet, Sum, add_process_set, ccl_built, cross_rank,
                             cross_size, cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled, init,
                             is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                             nccl_built, rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
                             stop_timeline)
from hora._keras import saving as _saving
from hora._keras.optimizer import DistributedOptimizer
from hora._keras.values import allgather, allreduce, broadcast, broadcast_global_variables, reducescatter
from hora.tensorflow.keras import callbacks, elastic  # noqa: F401

load_model = _saving.load_model_for(tf.keras)
