"""Native op libraries of a framework (e.g. hora.tensorflow's, which TensorFlow loads with
tf.load_op_library) reach the process's engine through a table of C functions that hora._core
hands out (src/python/engine_access.h): attach() gives it to a loaded library."""

import ctypes

from hora import _core


def attach(library_path):
    """Gives the library at library_path (already loaded by its framework; loading it again here
    finds the same copy) the engine's table. ImportError when the library was built for another
    version of the table, i.e. with another hora."""
    library = ctypes.CDLL(library_path)
    if library.hora_attach_engine(ctypes.c_void_p(_core.engine_access())) != 0:
        raise ImportError(f"{library_path} was built for another version of hora; rebuild hora (scripts/setup.sh)")
