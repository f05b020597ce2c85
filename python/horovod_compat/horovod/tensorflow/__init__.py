"""horovod.tensorflow is hora.tensorflow: the same functions and the same state, under Horovod's
names.

Every Python module of hora.tensorflow is registered under horovod.tensorflow too (the module object
itself, not a copy), so `from horovod.tensorflow.mpi_ops import allgather` and
`horovod.tensorflow.mpi_ops is hora.tensorflow.mpi_ops` both hold. Subpackages (keras) have
their own alias package, imported only when a script asks for them, as with Horovod.
"""

import importlib
import pkgutil
import sys

import hora.tensorflow
from hora.tensorflow import *  # noqa: F401,F403  (the public API, as hvd.*)
from hora.tensorflow import _executing_eagerly, _make_allreduce_grads_fn  # noqa: F401  (used by Horovod's Keras code)

for _module in pkgutil.iter_modules(hora.tensorflow.__path__):
    if not _module.ispkg and not _module.name.startswith("_"):  # not the op library (_ops.so)
        sys.modules[f"{__name__}.{_module.name}"] = importlib.import_module(f"hora.tensorflow.{_module.name}")
        globals()[_module.name] = sys.modules[f"{__name__}.{_module.name}"]
del _module
