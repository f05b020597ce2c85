"""horovod.torch is hora.torch: the same functions and the same state, under Horovod's names.

Every submodule of hora.torch is registered under horovod.torch too (the module object itself,
not a copy), so `from horovod.torch.mpi_ops import allreduce_async_` and
`horovod.torch.mpi_ops is hora.torch.mpi_ops` both hold.
"""

import importlib
import pkgutil
import sys

import hora.torch
from hora.torch import *  # noqa: F401,F403  (the public API, as hvd.*)

for _module in pkgutil.iter_modules(hora.torch.__path__):
    sys.modules[f"{__name__}.{_module.name}"] = importlib.import_module(f"hora.torch.{_module.name}")
    globals()[_module.name] = sys.modules[f"{__name__}.{_module.name}"]
del _module
