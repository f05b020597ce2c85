"""This process's place in the job (rank, size, local and cross numbers, hostname, elastic
generation), asked from the engine once after each init: rank() and size() are called per step."""

from hora import _core

_cache = {}


def identity():
    """The engine's identity dict; ValueError before init, as Horovod."""
    if not _cache:
        if not _core.is_initialized():
            raise ValueError("hora has not been initialized; use hvd.init().")
        _cache.update(_core.identity())
    return _cache


def forget():
    """After init or shutdown: the next question about ranks asks the engine again (an elastic
    job's ranks change from one generation to the next)."""
    _cache.clear()
