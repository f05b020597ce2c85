"""horovod.torch.mpi_ops's names in one module, as Horovod scripts import them (`from
horovod.torch.mpi_ops import allreduce_async_`): the collectives on torch tensors
(allreduce_ops.py, gather_ops.py, scatter_ops.py), the process's identity, capabilities and
process sets (basics.py), the reduce ops, poll / synchronize, join and barrier (hora.common).

Async forms return an int handle for poll() and synchronize(); every wait releases the GIL.
"""

from hora.common.exceptions import HoraInternalError, HorovodInternalError  # noqa: F401
from hora.common import basics as _basics  # noqa: F401  (Horovod's name, which code written for it reaches into)
from hora.common.handles import poll, synchronize  # noqa: F401
from hora.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hora.common.requests import barrier  # noqa: F401
from hora.common.requests import join as _join
from hora.torch.allreduce_ops import (allreduce, allreduce_, allreduce_async, allreduce_async_,  # noqa: F401
                                      grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                      grouped_allreduce_async_)
from hora.torch.basics import (ProcessSet, add_process_set, ccl_built, cross_rank, cross_size, cuda_built,  # noqa: F401
                               ddl_built, forget_identity, global_process_set, gloo_built, gloo_enabled, init,
                               is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                               mpi_threads_supported, nccl_built, note_compute_threads, rank, remove_process_set,
                               rocm_built, shutdown, size, start_timeline, stop_timeline)
from hora.torch.compression import Compression  # noqa: F401
from hora.torch.gather_ops import (allgather, allgather_async, broadcast, broadcast_, broadcast_async,  # noqa: F401
                                   broadcast_async_, grouped_allgather, grouped_allgather_async,
                                   sparse_allreduce_async)
from hora.torch.scatter_ops import (alltoall, alltoall_async, grouped_reducescatter,  # noqa: F401
                                    grouped_reducescatter_async, reducescatter, reducescatter_async)


def join(device=-1):
    """Tells the other ranks this one has no more data; until all have joined, their allreduces
    go on with zeros from this rank (Average divides by every rank, as Horovod's does). Returns
    the last rank to join. (`device` is Horovod's GPU for the zeros; hora runs on CPU.)"""
    return _join()
