"""horovod.torch is hora.torch: the same functions and the same state, under Horovod's names.

Every submodule of hora.torch is registered under horovod.torch too (the module object itself,
not a copy), so `from horovod.torch.mpi_ops import allreduce_async_` and
`horovod.torch.mpi_ops is hora.torch.mpi_ops` both hold.
"""

import hora.torch
from hora.torch import *  # noqa: F401,F403  (the public API, as hvd.*)
from horovod._alias import alias_submodules

alias_submodules(__name__, hora.torch)
