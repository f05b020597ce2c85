"""Horovod's exception names for hora's errors: HorovodInternalError is hora's
HoraInternalError, the base of every collective failure (a dead peer, a timeout, a mismatch,
a shut-down engine); HostsUpdatedInterrupt is hora.torch.elastic's."""

from hora.torch import HorovodInternalError  # noqa: F401
from hora.torch.elastic import HostsUpdatedInterrupt  # noqa: F401
