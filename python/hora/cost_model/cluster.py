"""A described cluster: what the cost model needs to know about where the ranks run."""

import dataclasses
from typing import Optional

DEFAULT_CACHE_BYTES = 32 * 2**20  # a server CPU's last-level cache


@dataclasses.dataclass(frozen=True)
class Cluster:
    hosts: int
    ranks_per_host: int
    link_gbit: float             # each host's link, each direction (full duplex)
    # Cores that every process of the job shares (the namespace hosts of one machine). None: each
    # process has a core of its own, as on a real cluster.
    cores: Optional[int] = None
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

    @property
    def ranks(self):
        return self.hosts * self.ranks_per_host

    def wire_seconds(self, link_bytes):
        """Seconds a link takes for these bytes at its nominal rate (the `wire` term's unit)."""
        return link_bytes * 8 / (self.link_gbit * 1e9)

    def cached(self, working_set_bytes):
        """The share of a host's working set that stays in its cache."""
        return min(1.0, self.cache_bytes / working_set_bytes) if working_set_bytes > 0 else 1.0

    def cpu_lanes(self, busiest, everyone, processes):
        """The CPU's lanes of a phase: the busiest process's work on a core of its own and, when the
        `processes` share fewer cores, all their work spread over the cores."""
        if self.cores is None or processes <= self.cores:
            return (busiest,)
        return busiest, everyone / self.cores
