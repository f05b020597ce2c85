"""hora: distributed data-parallel training.

``hora.run(fn, np=N)`` runs a Python function on N workers through horarun and returns their
results in rank order (this package's HorovodRunner). The PyTorch frontend is ``hora.torch``.
"""

from hora.runner import RunError, run

__version__ = "0.1.0"
__all__ = ["run", "RunError", "__version__"]
