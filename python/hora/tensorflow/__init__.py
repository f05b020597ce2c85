"""hora's TensorFlow frontend, a drop-in for horovod.tensorflow: `import hora.tensorflow as hvd`.

Collectives on tf.Tensor (eager and inside tf.function, with the gradients Horovod registers):
allreduce, grouped_allreduce, allgather, grouped_allgather, broadcast, broadcast_, alltoall,
reducescatter, grouped_reducescatter, join; broadcast_variables, broadcast_object,
allgather_object; the size_op / rank_op family. Training: DistributedGradientTape,
PartialDistributedGradientTape, DistributedOptimizer, SyncBatchNormalization, elastic. The ops
are asynchronous kernels of hora's op library, which one build serves for several TensorFlow
versions (docs/architecture.md, "TensorFlow ops")."""

from hora.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                                start_timeline, stop_timeline)
from hora.common.exceptions import HoraInternalError, HorovodInternalError  # noqa: F401
from hora.common.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from hora.tensorflow import elastic  # noqa: F401
from hora.tensorflow.collectives import allreduce, grouped_allreduce, grouped_reducescatter, reducescatter  # noqa: F401
from hora.tensorflow.compression import Compression  # noqa: F401
from hora.tensorflow.functions import (allgather_object, broadcast_object, broadcast_object_fn,  # noqa: F401
                                      broadcast_variables)
from hora.tensorflow.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, _allreduce,  # noqa: F401
                                     _grouped_allreduce, _grouped_reducescatter, _reducescatter, allgather,
                                     alltoall, broadcast, broadcast_, check_num_rank_power_of_2, grouped_allgather,
                                     handle_average_backwards_compatibility, init, join, local_rank_op,
                                     local_size_op, process_set_included_op, rank_op, size_op)
from hora.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from hora.tensorflow.training import (DistributedGradientTape, DistributedOptimizer,  # noqa: F401
                                      PartialDistributedGradientTape, _allreduce_cond, _grouped_allreduce_cond,
                                      _make_allreduce_grads_fn)
from hora.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, refs_to_vars, vars_to_refs  # noqa: F401


import tensorflow as tf  # noqa: E402


def broadcast_global_variables(root_rank):
    """TF1 graphs: broadcasts every global variable from root_rank. Eager code (TensorFlow 2)
    broadcasts its variables with hvd.broadcast_variables instead."""
    if _executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """TF1 sessions: broadcasts every global variable from root_rank once the session exists
    (after initialization or a restore), so that every process starts alike."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
