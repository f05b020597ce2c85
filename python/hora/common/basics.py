"""Joining and leaving the job, the process's place in it, what this build can do, and the
timeline: the parts of a frontend's API that move no tensors (Horovod's
horovod.common.basics)."""

from hora import _core, _departure
from hora.common import handles, thread_budget
from hora.common.identity import forget as _forget_identity
from hora.common.identity import identity
from hora.common.process_sets import process_set_ids_and_ranks as _get_process_set_ids_and_ranks  # noqa: F401
from hora.common.process_sets import forget_unnamed_calls, register_at_init


def init(comm=None, process_sets=None, *, compute_threads=None):
    """Joins the job (started by horarun, mpirun or srun; a plain process is a job of one).
    process_sets: ProcessSet objects to register now, on every rank alike (their process_set_id
    is set), or "dynamic" (Horovod's switch for adding sets later, which hora always allows).
    compute_threads: how many threads the framework computes with (set_compute_threads)."""
    if comm is not None:
        raise ValueError("hora does not take an MPI communicator; start the job with horarun or mpirun")
    _core.init()
    _departure.install()  # at exit, the other ranks learn why this one left
    if compute_threads is not None:
        set_compute_threads(compute_threads)
    _forget_identity()
    thread_budget.share_openblas(local_size())  # Note [thread budget]: mpirun and srun set no OMP_NUM_THREADS
    register_at_init(process_sets, size())


def shutdown():
    """Leaves the job; the operations in flight and the numbering of unnamed calls go with it."""
    _core.shutdown("called shutdown()")
    _forget_identity()
    handles.forget()
    forget_unnamed_calls()


def set_compute_threads(threads):
    """Tells the engine how many threads the framework computes with, so that hora's waiting
    threads leave those cores alone (scripts often change the number after init)."""
    _core.set_compute_threads(threads)


def is_initialized():
    return _core.is_initialized()


def rank():
    """The rank of the calling process in the job: 0 to size() - 1. Rank 0 is where a
    script logs and writes checkpoints."""
    return identity()["rank"]


def size():
    """The number of processes in the job."""
    return identity()["size"]


def local_rank():
    """The rank of the calling process among the processes on its host: 0 to local_size() - 1.
    A process uses it to pick its GPU (one per process) or its share of the host."""
    return identity()["local_rank"]


def local_size():
    """The number of processes of the job on the calling process's host."""
    return identity()["local_size"]


def cross_rank():
    """The index of the calling process's host among the job's hosts (the rank among the
    processes that have its local rank)."""
    return identity()["cross_rank"]


def cross_size():
    """The number of hosts of the job (the number of processes that have the calling process's
    local rank)."""
    return identity()["cross_size"]


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    ident = identity()
    return ident["local_size"] * ident["cross_size"] == ident["size"]


# Capabilities, answered truthfully: hora has its own transport and links no MPI, gloo or NCCL.
def mpi_threads_supported():
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    _core.start_timeline(file_path, mark_cycles)


def stop_timeline():
    _core.stop_timeline()
