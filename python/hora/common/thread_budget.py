"""The Python side of Note [thread budget] (launcher/thread_budget.h): how many threads the math
libraries of a rank may start when the user did not say. horarun says it with OMP_NUM_THREADS
for ranks that share a host; ranks that mpirun, srun or a cluster manager started get nothing,
so init gives them their share of the host's cores itself, once it knows how many ranks the host
has: TensorFlow's pools (hora.tensorflow), and here OpenBLAS's, which every frontend has beneath
it (Debian's torch and numpy do their matrix products in it) and which torch.set_num_threads
does not reach."""

import ctypes
import os

# The variables that say how many threads OpenBLAS starts (it reads them when it loads): set, the
# user has chosen, and hora leaves the library alone.
_OPENBLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS")


def omp_budget():
    """OMP_NUM_THREADS when it is a count, else None ("" when set to something else: the user
    chose)."""
    value = os.environ.get("OMP_NUM_THREADS")
    if value is None:
        return None
    return int(value) if value.isdigit() and int(value) > 0 else ""


def usable_cores():
    """The cores this process may run on (its affinity mask: taskset and cpusets count), as
    horarun counts them (usableCores)."""
    return len(os.sched_getaffinity(0)) or 1


def host_share(local_size):
    """A rank's share of its host's cores, when `local_size` ranks share them."""
    return max(1, usable_cores() // max(1, local_size))


def _loaded_openblas():
    """The libraries this process has loaded that may be OpenBLAS (a process may hold two: the
    system's and a wheel's own copy; Debian's libblas.so.3 is it, in a folder named after it), by
    the paths the kernel maps them from."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if "openblas" in path:
                    paths.add(path)
    except OSError:  # no /proc: nothing found, the libraries keep their own pools
        pass
    return sorted(paths)


def openblas_threads():
    """{path: threads} of each OpenBLAS this process has loaded."""
    found = {}
    for path in _loaded_openblas():
        pool = _attach(path)
        if pool is not None:
            threads, _ = pool
            found[path] = threads()
    return found


# OpenBLAS's functions that get and set its pool's size: its own names, and those of the copy that
# numpy's and scipy's wheels carry (scipy_openblas, renamed so as not to clash with another
# OpenBLAS in the process; "64_" in its 64-bit-integer build).
_POOL_FUNCTIONS = (("openblas_get_num_threads", "openblas_set_num_threads"),
                   ("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                   ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"))


def _attach(path):
    """(threads, resize): the functions that read and set the pool size of the already-loaded
    library at `path` if it is an OpenBLAS (RTLD_NOLOAD: nothing new is loaded into the process),
    else None."""
    try:
        library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    for get, set_ in _POOL_FUNCTIONS:
        if hasattr(library, get) and hasattr(library, set_):
            threads, resize = getattr(library, get), getattr(library, set_)
            threads.restype = ctypes.c_int
            resize.argtypes = [ctypes.c_int]
            return threads, resize
    return None


def share_openblas(local_size):
    """Gives each loaded OpenBLAS this rank's share of the host's cores when `local_size` ranks
    share the host and none of _OPENBLAS_VARIABLES is set; lowers a pool, never grows one. Returns
    the share it gave, or None."""
    if local_size <= 1 or any(name in os.environ for name in _OPENBLAS_VARIABLES):
        return None
    share = host_share(local_size)
    given = None
    for path in _loaded_openblas():
        pool = _attach(path)
        if pool is None:
            continue
        threads, resize = pool
        if threads() > share:
            resize(share)
            given = share
    return given
