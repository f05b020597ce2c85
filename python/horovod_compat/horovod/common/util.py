"""horovod.common.util: the helpers of Horovod's that scripts and Horovod's own test suites import
(version checks, what the build has, environment and list helpers), answering for hora's build."""

import contextlib
import importlib.util
import os

from packaging import version as _version

import hora.common.basics as _basics


def is_version_greater_equal_than(ver, target):
    """Whether version string ``ver`` is at least ``target`` ("major.minor.patch")."""
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError(f"is_version_greater_equal_than takes strings, not {type(ver).__name__} and "
                         f"{type(target).__name__}")
    if len(target.split(".")) != 3:
        raise ValueError(f"the target version must be major.minor.patch, not {target!r}")
    return _version.parse(ver) >= _version.parse(target)


def extension_available(ext_base_name, verbose=False):
    """Whether the framework named like Horovod's extension (``horovod.torch`` ...) is usable:
    hora's frontend for it imports when the framework itself is installed."""
    framework = ext_base_name.rsplit(".", 1)[-1]
    return importlib.util.find_spec({"keras": "tensorflow"}.get(framework, framework)) is not None


def gpu_available(ext_base_name, verbose=False):
    """hora has no GPU collectives."""
    return False


def mpi_built(verbose=False):
    return _basics.mpi_built()


def gloo_built(verbose=False):
    return _basics.gloo_built()


def nccl_built(verbose=False):
    return _basics.nccl_built()


def ddl_built(verbose=False):
    return _basics.ddl_built()


def ccl_built(verbose=False):
    return _basics.ccl_built()


@contextlib.contextmanager
def env(**kwargs):
    """Sets environment variables for the block and restores them after it (None unsets)."""
    saved = {name: os.environ.get(name) for name in kwargs}
    try:
        for name, value in kwargs.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def num_rank_is_power_2(num_rank):
    """Whether num_rank is a positive power of two (Adasum's condition)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def split_list(items, n):
    """``items`` in ``n`` consecutive parts of sizes differing by at most one."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True
