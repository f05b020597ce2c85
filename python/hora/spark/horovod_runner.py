"""HorovodRunner, as Databricks documents it (sparkdl.HorovodRunner): ``HorovodRunner(np=2)
.run(main, **kwargs)`` runs ``main(**kwargs)`` on np ranks and returns rank 0's return value.

np > 0: np Spark tasks in barrier mode (hora.spark.run). np < 0: -np processes on the driver
(hora.run, through horarun), to debug on one machine. np = 0 meant "all task slots" in early
Databricks releases and is refused, as in later ones.
"""

from hora.runner import run as run_locally
from hora.spark.runner import run as run_on_spark

_VERBOSITIES = ("all", "log_callback_only")


class HorovodRunner:
    def __init__(self, *, np, driver_log_verbosity="all"):
        if not isinstance(np, int) or np == 0:
            raise ValueError(f"HorovodRunner: np must be a non-zero int (n > 0: n Spark tasks, -n: n processes on "
                             f"the driver), got {np!r}")
        if driver_log_verbosity not in _VERBOSITIES:
            raise ValueError(f"HorovodRunner: driver_log_verbosity must be one of {_VERBOSITIES}, got "
                             f"{driver_log_verbosity!r}")
        self.num_processor = np
        self.driver_log_verbosity = driver_log_verbosity

    def run(self, main, **kwargs):
        """Runs ``main(**kwargs)`` on every rank and returns rank 0's return value."""
        if self.num_processor < 0:
            return run_locally(main, kwargs=kwargs, np=-self.num_processor)[0]
        streams = {}
        if self.driver_log_verbosity == "log_callback_only":
            streams = {"stdout": _Discard(), "stderr": _Discard()}
        return run_on_spark(main, kwargs=kwargs, num_proc=self.num_processor, **streams)[0]


class _Discard:
    """The ranks' output under driver_log_verbosity='log_callback_only': Databricks shows only
    what its log callbacks send, and hora has none, so nothing."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass
