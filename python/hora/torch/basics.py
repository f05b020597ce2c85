"""The parts of horovod.torch that move no tensors: init and shutdown, the process's identity,
capabilities, process sets and the timeline, from hora.common; what is torch's is telling the
engine how many threads torch computes with."""

import torch

from hora.common import basics
from hora.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                                start_timeline, stop_timeline)
from hora.common.identity import forget as forget_identity  # noqa: F401  (importable from here, as it was)
from hora.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                      remove_process_set)


def init(comm=None, process_sets=None):
    """Joins the job (started by horarun, mpirun or srun; a plain process is a job of one).
    process_sets: ProcessSet objects to register now, on every rank alike (their process_set_id
    is set), or "dynamic" (Horovod's switch for adding sets later, which hora always allows)."""
    basics.init(comm, process_sets, compute_threads=torch.get_num_threads())


def note_compute_threads():
    """Tells the engine how many threads torch computes with, so that hora's waiting threads
    leave those cores alone (scripts often call torch.set_num_threads after init)."""
    basics.set_compute_threads(torch.get_num_threads())
