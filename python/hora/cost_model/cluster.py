"""A described cluster: what the cost model needs to know about where the ranks run."""

import dataclasses
from typing import Optional

from hora.cost_model.params import costs

DEFAULT_CACHE_BYTES = 32 * 2**20  # a server CPU's last-level cache
CHUNK_BYTES = 256 * 1024  # HORA_CHUNK_BYTES: transports pass a message on in pieces of at most this


def handoffs(nbytes, messages=1):
    """Times a process passes data to a peer, or takes it: once a chunk, at least once a message."""
    return max(float(messages), nbytes / CHUNK_BYTES)


@dataclasses.dataclass(frozen=True)
class Cluster:
    hosts: int
    ranks_per_host: int
    link_gbit: float             # each host's link, each direction (full duplex)
    # Cores that every process of the job shares (the namespace hosts of one machine). None: see
    # cores_per_host.
    cores: Optional[int] = None
    # Each host's cores, which its own processes share (its ranks; a server's host, its server).
    # None (and no `cores`): each process has a core of its own.
    cores_per_host: Optional[int] = None
    # Each host's last-level cache: copies and reductions whose data does not fit run at the
    # memory's speed (the `mem` term).
    cache_bytes: float = DEFAULT_CACHE_BYTES

    def __post_init__(self):
        if self.hosts < 1 or self.ranks_per_host < 1:
            raise ValueError(f"a cluster needs at least 1 host and 1 rank per host, got {self}")
        if self.link_gbit <= 0:
            raise ValueError(f"link_gbit must be positive, got {self.link_gbit}")
        if self.cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be positive, got {self.cache_bytes}")
        if self.cores is not None and self.cores_per_host is not None:
            raise ValueError("give the cores all processes share or each host's, not both")
        if min(c for c in (self.cores, self.cores_per_host, 1) if c is not None) < 1:
            raise ValueError(f"cores must be at least 1, got {self}")

    @property
    def ranks(self):
        return self.hosts * self.ranks_per_host

    def wire_seconds(self, link_bytes):
        """Seconds a link takes for these bytes at its nominal rate (the `wire` term's unit)."""
        return link_bytes * 8 / (self.link_gbit * 1e9)

    def cached(self, working_set_bytes):
        """The share of a host's working set that stays in its cache."""
        return min(1.0, self.cache_bytes / working_set_bytes) if working_set_bytes > 0 else 1.0

    def sharing(self, processes, host_processes):
        """(processes, cores) of the busiest process's machine: all `processes` on the shared
        cores, or its host's `host_processes` on the host's; None when each has a core."""
        if self.cores is not None:
            return processes, self.cores
        if self.cores_per_host is not None:
            return host_processes, self.cores_per_host
        return None

    def off_core(self, processes, host_processes):
        """The share of the time a process waits off a core, when processes share them round
        robin: 1 - cores / processes, 0 with cores to spare."""
        shared = self.sharing(processes, host_processes)
        return max(0.0, 1.0 - shared[1] / shared[0]) if shared else 0.0

    def cpu(self, busiest, everyone, processes, handed, host=None):
        """A phase's CPU side, as phase()'s keywords: the cores' lanes (the busiest process's work
        on a core of its own and, when the processes share fewer cores, all their work spread
        over the cores) and its wait (each of the busiest process's hand-offs, `handed`, finds
        its peer off a core for the share off_core and waits `sched` for it).
        `host`: (processes, work, hand-offs of its busiest process) of the busiest host when each
        host has cores of its own; by default its ranks, whose work is their share of everyone's
        and whose hand-offs are `handed` (the ranks alike)."""
        per_host, host_work, host_handed = host or (self.ranks_per_host, everyone * self.ranks_per_host / processes,
                                                    handed)
        shared = self.sharing(processes, per_host)
        if shared is None or shared[0] <= shared[1]:
            return dict(cores=(busiest,))
        if self.cores is None:  # the host's own cores
            everyone, handed = host_work, host_handed
        return dict(cores=(busiest, everyone / shared[1]),
                    waits=(costs(sched=self.off_core(processes, per_host) * handed),))
