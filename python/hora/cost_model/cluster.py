"""A described cluster: what the cost model needs to know about where the ranks run."""

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Cluster:
    hosts: int
    ranks_per_host: int
    link_gbit: float             # each host's link, each direction (full duplex)
    # Cores that every process of the job shares (the namespace hosts of one machine). None: each
    # process has a core of its own, as on a real cluster. CPU-bound terms (all but the wire)
    # stretch by processes / cores when the processes outnumber the cores.
    cores: Optional[int] = None

    def __post_init__(self):
        if self.hosts < 1 or self.ranks_per_host < 1:
            raise ValueError(f"a cluster needs at least 1 host and 1 rank per host, got {self}")
        if self.link_gbit <= 0:
            raise ValueError(f"link_gbit must be positive, got {self.link_gbit}")

    @property
    def ranks(self):
        return self.hosts * self.ranks_per_host

    def wire_seconds(self, link_bytes):
        """Seconds a link takes for these bytes at its nominal rate (the `wire` term's unit)."""
        return link_bytes * 8 / (self.link_gbit * 1e9)

    def cpu_stretch(self, processes):
        """How much longer CPU-bound work takes when `processes` run at once on the shared cores."""
        return 1.0 if self.cores is None else max(1.0, processes / self.cores)
