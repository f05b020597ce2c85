"""A training step's communication time for each way of exchanging the gradients, from 2 to 1,024
ranks, and which to use.

Allreduce: hora's engine fuses the gradients into buffers of at most HORA_FUSION_THRESHOLD and
allreduces each (the algorithm hora's plan picks, or one named). Parameter servers: every tensor
goes to the K servers in one push per server (servers.py). ps-sync gives allreduce's results;
ps-async does not wait for the others (stale gradients), so it is recommended only beside them.
"""

import dataclasses

from hora.cost_model import exchanges, servers
from hora.cost_model.cluster import DEFAULT_CACHE_BYTES, Cluster

FUSION_THRESHOLD = 128 * 2**20  # HORA_FUSION_THRESHOLD's default
RANKS = tuple(2 ** k for k in range(1, 11))  # 2 .. 1,024


def fusion_buffers(tensor_elements, threshold=FUSION_THRESHOLD):
    """Bytes of each fused buffer: tensors in order, a new buffer when the next would overflow."""
    buffers = []
    for elements in tensor_elements:
        size = elements * servers.FLOAT_BYTES
        if buffers and buffers[-1] + size <= threshold:
            buffers[-1] += size
        else:
            buffers.append(size)
    return buffers


def allreduce_step(cluster, tensor_elements, algorithm="auto"):
    """The phases of every fused buffer's allreduce, one after the other."""
    return [p for size in fusion_buffers(tensor_elements)
            for p in exchanges.ALLREDUCE_ALGORITHMS[algorithm](cluster, size)]


def server_counts(max_servers):
    return [k for k in (2 ** i for i in range(0, 21)) if k <= max_servers]


def best_servers(params, cluster, tensor_elements, mode, max_servers):
    """(seconds, K) of the fastest number of servers (powers of two up to max_servers)."""
    options = [(params.seconds(servers.PS_MODES[mode](cluster, tensor_elements, k)), k)
               for k in server_counts(max_servers)]
    return min(options)


@dataclasses.dataclass
class Row:
    ranks: int
    hosts: int
    seconds: dict        # {"ring": s, "recursive-doubling": s, "hierarchical": s, "auto": s}
    ps_sync: tuple       # (seconds, servers)
    ps_async: tuple
    recommended: str


def recommend(seconds, ps_sync, ps_async):
    """The faster of allreduce (hora's choice) and ps-sync, which give the same gradients; ps-async
    named after it when it is faster still (it changes the training: stale gradients)."""
    if ps_sync[0] < seconds["auto"]:
        choice = f"ps-sync, {ps_sync[1]} server{'s' if ps_sync[1] > 1 else ''}"
        best = ps_sync[0]
    else:
        choice, best = "allreduce", seconds["auto"]
    if ps_async[0] < best:
        choice += f" (ps-async, {ps_async[1]} server{'s' if ps_async[1] > 1 else ''}, if stale gradients are acceptable)"
    return choice


def predict_row(params, tensor_elements, ranks, ranks_per_host, link_gbit, max_servers, cores=None,
                cache_bytes=DEFAULT_CACHE_BYTES, cores_per_host=None):
    per_host = min(ranks, ranks_per_host)
    cluster = Cluster(hosts=max(1, ranks // per_host), ranks_per_host=per_host, link_gbit=link_gbit, cores=cores,
                      cores_per_host=cores_per_host, cache_bytes=cache_bytes)
    seconds = {name: params.seconds(allreduce_step(cluster, tensor_elements, name))
               for name in ("ring", "recursive-doubling", "hierarchical", "auto")}
    ps_sync = best_servers(params, cluster, tensor_elements, "ps-sync", max_servers)
    ps_async = best_servers(params, cluster, tensor_elements, "ps-async", max_servers)
    return Row(cluster.ranks, cluster.hosts, seconds, ps_sync, ps_async, recommend(seconds, ps_sync, ps_async))


def predict_table(params, tensor_elements, ranks_per_host, link_gbit, max_servers, cores=None, ranks=RANKS,
                  cache_bytes=DEFAULT_CACHE_BYTES, cores_per_host=None):
    return [predict_row(params, tensor_elements, n, ranks_per_host, link_gbit, max_servers, cores, cache_bytes,
                        cores_per_host)
            for n in ranks]
