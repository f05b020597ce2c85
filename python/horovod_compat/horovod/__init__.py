"""The `horovod` name, answered by hora (installed only on request: see hora's docs/torch.md).

Unchanged Horovod scripts import `horovod.torch` or `horovod.tensorflow` and call `horovod.run`; all
resolve to hora.
"""

from horovod.runner import run

# The Horovod release whose Python API this package mirrors, so that version checks in
# Horovod scripts pass; hora's own version is hora.__version__.
__version__ = "0.28.1"
