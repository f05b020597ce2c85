"""The worker side of hora.run (python -m hora._run_worker, started by horarun)."""

import base64
import os
import sys
import time
import traceback

import cloudpickle

from hora import _departure
from hora.runner import RESULT_MARKER


def _is_consequence(e):
    """Whether `e` is hora's report of another rank's failure or departure (PeerError,
    ShutdownError), rather than a root cause of this rank's own."""
    core = sys.modules.get("hora._core")
    return core is not None and isinstance(e, (core.PeerError, core.ShutdownError))


def _report(rank, outcome):
    try:
        data = cloudpickle.dumps(outcome)
    except Exception as e:  # an unpicklable return value is this rank's error
        data = cloudpickle.dumps(("error", type(e).__name__, f"cannot pickle the result: {e}",
                                  traceback.format_exc(), None, time.time(), False))
    sys.stdout.write(f"{RESULT_MARKER} {rank} {base64.b64encode(data).decode()}\n")
    sys.stdout.flush()


def outcome_of(call):
    """Calls ``call()`` and returns its outcome: ("ok", value), or ("error", type name, message,
    traceback, pickled exception or None, time, whether it reports another rank's failure). A
    rank that raised leaves the job, so that the others' pending collectives fail naming it."""
    try:
        return ("ok", call())
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: the caller hears of them
        when = time.time()  # the caller leads with the root cause: the earliest non-consequence
        try:
            exc_bytes = cloudpickle.dumps(e)
        except Exception:
            exc_bytes = None
        outcome = ("error", type(e).__name__, str(e), traceback.format_exc(), exc_bytes, when, _is_consequence(e))
        # The other ranks' pending collectives fail naming this rank and the exception.
        _departure.leave(f"is exiting: its hora.run function raised {type(e).__name__}: {e}")
        return outcome


def _rank_now(start_rank):
    """The rank this worker ends with: an elastic job's ranks change as it re-forms (its workers
    have no HORA_RANK). The function's own hora, if it initialized one, knows it."""
    basics = sys.modules.get("hora.common.basics")
    if basics is not None and basics.is_initialized():
        return basics.rank()
    return start_rank


def main():
    rank = int(os.environ.get("HORA_RANK", "0"))
    payload = os.environ.get("HORA_RUN_PAYLOAD")
    if payload is None:
        with open(os.environ["HORA_RUN_PAYLOAD_FILE"]) as f:
            payload = f.read()

    def call():
        fn, args, kwargs = cloudpickle.loads(base64.b64decode(payload))
        return fn(*args, **kwargs)

    outcome = outcome_of(call)
    _report(_rank_now(rank), outcome)
    return 0 if outcome[0] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
