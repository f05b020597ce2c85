"""hora.keras: a drop-in for horovod.keras (`import hora.keras as hvd`), for the top-level `keras`
package: Keras 2 (keras <= 2.15) or Keras 3. Its API is hora.tensorflow.keras's (see there), with
Horovod's PartialDistributedOptimizer and Adasum besides."""

import keras

from hora.tensorflow import (Adasum, Average, Compression, Sum, ccl_built, cross_rank, cross_size, cuda_built,
                             ddl_built, global_process_set, gloo_built, gloo_enabled, init, is_initialized,
                             local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                             rocm_built, shutdown, size, start_timeline, stop_timeline)
from hora._keras import saving as _saving
from hora._keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from hora._keras.values import allgather, allreduce, broadcast, broadcast_global_variables, reducescatter
from hora.keras import callbacks, elastic  # noqa: F401

load_model = _saving.load_model_for(keras)
