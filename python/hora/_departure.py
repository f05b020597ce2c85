"""Why this process leaves the job, so that the other ranks' errors name it (Note [departures]
in src/engine/departure.h): hora.torch.init installs the hooks; hora.torch.shutdown and the
hora.run worker say why themselves.

Each reason completes "rank N ..." in the other ranks' ShutdownError:
"hora has shut down: rank 1 is exiting after an unhandled ValueError: bad shard 3"."""

import atexit
import sys

_MAX_REASON = 500  # characters: a reason travels to every rank
_installed = False
_unhandled = None  # "ValueError: bad shard 3", once the script raised past its top level


def install():
    """At exit, shut hora down saying why the process leaves (an unhandled exception or not)."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def note_unhandled(kind, value, tb):
        global _unhandled
        _unhandled = f"{kind.__name__}: {value}"
        previous(kind, value, tb)

    sys.excepthook = note_unhandled  # runs before the atexit hooks for an uncaught exception
    atexit.register(_at_exit)


def _at_exit():
    if _unhandled:
        leave(f"is exiting after an unhandled {_unhandled}")
    else:
        leave("is exiting without having called shutdown()")


def leave(reason):
    """Shuts hora's engine down (if running) with `reason` for the other ranks."""
    core = sys.modules.get("hora._core")
    if core is not None and core.is_initialized():
        if len(reason) > _MAX_REASON:
            reason = reason[:_MAX_REASON] + "..."
        core.shutdown(reason)
