"""Horovod's exception names for hora's errors: HorovodInternalError is hora's
HoraInternalError, the base of every collective failure (a dead peer, a timeout, a mismatch,
a shut-down engine); HostsUpdatedInterrupt is elastic training's (hora.common.exceptions)."""

from hora.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
