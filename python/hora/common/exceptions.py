"""The errors of hora's Python API, for every frontend.

HoraInternalError (raised by hora._core, also under Horovod's name HorovodInternalError) is the
base of every collective failure; its subclasses name the kind: MismatchError (the ranks' calls
disagree), PeerError (a rank died or closed its connections), TimeoutError, ShutdownError (the
engine has shut down). Invalid arguments are ValueError, as in Horovod."""

from hora._core import HoraInternalError, MismatchError, PeerError, ShutdownError, TimeoutError, WorkerRemovedError

HorovodInternalError = HoraInternalError  # scripts written for Horovod catch this name


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by an elastic state's commit() / check_host_updates() on every rank at the same
    step when the driver announced that hosts were added or removed. skip_sync: only hosts
    were removed, so the remaining ranks already agree and need no broadcast."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


__all__ = ["HoraInternalError", "HorovodInternalError", "HostsUpdatedInterrupt", "MismatchError", "PeerError",
           "ShutdownError", "TimeoutError", "WorkerRemovedError"]
