"""Cost vectors (params.py) of one exchange of S bytes of float32 gradients, per algorithm, on a
Cluster, following what hora does (docs/algorithms.md, src/collectives/plan.cc, src/ps/).

Placement: ranks host by host (ranks 0..L-1 on the first host, ...), so a flat ring crosses each
host's link once per direction, and each recursive-doubling round whose partner distance is at
least L crosses with all L ranks of a host at once. Parameter servers run on hosts of their own.
"""

import math

from hora.cost_model.params import costs

RING_THRESHOLD = 512 * 1024      # HORA_RING_THRESHOLD: above it the ring, up to it recursive doubling
SHM_RING_THRESHOLD = 4 * 1024    # HORA_SHM_RING_THRESHOLD: the same inside one host


def hop(cluster, crosses, message_bytes, link_bytes=None):
    """Every rank sends one message of `message_bytes`, across hosts or inside one; `link_bytes`
    is what the busiest link carries meanwhile (several ranks of a host may cross at once)."""
    # Sending and receiving is CPU work (on one machine's namespace hosts, the messages' latency
    # is too): all of it stretches when the ranks outnumber the cores; the wire does not.
    stretch = cluster.cpu_stretch(cluster.ranks)
    if not crosses:
        return stretch * costs(alpha_shm=1, beta_shm=message_bytes)
    link_bytes = message_bytes if link_bytes is None else link_bytes
    return costs(wire=cluster.wire_seconds(link_bytes)) + stretch * costs(alpha_net=1, beta_tcp=message_bytes)


def reduction(cluster, reduced_bytes):
    """Every rank adds `reduced_bytes` into its accumulator."""
    return costs(gamma=reduced_bytes * cluster.cpu_stretch(cluster.ranks))


def ring(cluster, size):
    """Ring allreduce over all ranks: 2 (n-1) steps of S/n, the first n-1 reducing."""
    n = cluster.ranks
    if n == 1:
        return costs()
    segment = size / n
    return 2 * (n - 1) * hop(cluster, cluster.hosts > 1, segment) + (n - 1) * reduction(cluster, segment)


def recursive_doubling(cluster, size):
    """log2 p exchanges of the whole message, each reduced (p the largest power of two <= n); for n
    not a power of two a fold before and after (the extra ranks hand theirs in, then get it back)."""
    n, per_host = cluster.ranks, cluster.ranks_per_host
    if n == 1:
        return costs()
    rounds = int(math.floor(math.log2(n)))
    total = costs()
    for k in range(rounds):
        crosses = cluster.hosts > 1 and 2 ** k >= per_host
        total = total + hop(cluster, crosses, size, size * per_host) + reduction(cluster, size)
    if n != 2 ** rounds:
        total = total + 2 * hop(cluster, cluster.hosts > 1, size) + reduction(cluster, size)
    return total


def hierarchical(cluster, size):
    """Reduce-scatter inside each host (a ring of L over shared memory), an allreduce of the S/L
    slice among the H ranks at each position (the L positions at once, so each host's link
    carries L slices), an allgather inside each host."""
    hosts, per_host = cluster.hosts, cluster.ranks_per_host
    if hosts == 1 or per_host == 1:
        return flat(cluster, size)
    slice_bytes = size / per_host
    local = (per_host - 1) * hop(cluster, False, slice_bytes)
    scatter = local + (per_host - 1) * reduction(cluster, slice_bytes)
    if slice_bytes > RING_THRESHOLD:
        across = 2 * (hosts - 1) * hop(cluster, True, slice_bytes / hosts, slice_bytes / hosts * per_host) + \
            (hosts - 1) * reduction(cluster, slice_bytes / hosts)
    else:
        rounds = math.ceil(math.log2(hosts))
        across = rounds * (hop(cluster, True, slice_bytes, slice_bytes * per_host) + reduction(cluster, slice_bytes))
    return scatter + across + local


def threshold(cluster):
    return SHM_RING_THRESHOLD if cluster.hosts == 1 else RING_THRESHOLD


def flat(cluster, size):
    """What hora's plan picks without the hierarchy (HORA_HIERARCHICAL_ALLREDUCE=0): the ring above
    the ring threshold, recursive doubling up to it."""
    return ring(cluster, size) if size > threshold(cluster) else recursive_doubling(cluster, size)


def hora_allreduce(cluster, size):
    """What hora's plan picks (HORA_HIERARCHICAL_ALLREDUCE=auto): the hierarchy across even hosts
    of several ranks for messages above the ring threshold, else the flat choice."""
    if cluster.hosts > 1 and cluster.ranks_per_host > 1 and size > RING_THRESHOLD:
        return hierarchical(cluster, size)
    return flat(cluster, size)


ALLREDUCE_ALGORITHMS = {"ring": ring, "recursive-doubling": recursive_doubling, "hierarchical": hierarchical,
                        "flat": flat, "auto": hora_allreduce}
