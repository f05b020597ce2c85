"""hora.torch: a drop-in for horovod.torch (`import hora.torch as hvd`).

    hvd.init()
    torch.set_num_threads(...)                       # (GPU users: pin by hvd.local_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    sampler = torch.utils.data.distributed.DistributedSampler(data, hvd.size(), hvd.rank())
"""

from hora.common.exceptions import MismatchError, PeerError, ShutdownError, TimeoutError
from hora.torch.compression import Compression
from hora.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters)
from hora.torch.mpi_ops import (Adasum, Average, HoraInternalError, HorovodInternalError, Max, Min, Product, Sum,
                                ProcessSet, add_process_set, allgather, allgather_async, allreduce, allreduce_,
                                allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size,
                                cuda_built, ddl_built, global_process_set, gloo_built, gloo_enabled,
                                grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                                grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                                grouped_reducescatter_async, init, is_homogeneous, is_initialized, join, local_rank,
                                local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, poll, rank,
                                reducescatter, reducescatter_async, remove_process_set, rocm_built, shutdown, size,
                                sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from hora.torch.optimizer import DistributedOptimizer
from hora.torch.sync_batch_norm import SyncBatchNorm
from hora.torch.training import (LearningRateSchedule, LearningRateWarmup, average_metrics, is_root, log,
                                 save_checkpoint)
from hora.torch import elastic  # noqa: E402,F401  (hvd.elastic)
