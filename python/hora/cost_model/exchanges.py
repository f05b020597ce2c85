"""The phases (params.py) of one allreduce of S bytes of float32 gradients, per algorithm, on a
Cluster, following what hora does (docs/algorithms.md, src/collectives/plan.cc).

Placement: ranks host by host (ranks 0..L-1 on the first host, ...), so a flat ring crosses each
host's link once per direction, and each recursive-doubling round whose partner distance is at
least L crosses with all L ranks of a host at once.

A step's lanes: the link (the bytes the busiest link carries one way), the busiest rank's core,
and, when the processes share fewer cores, everyone's work over the cores, and then also the
busiest rank's wait for its peers to be scheduled (each chunk it passes on or takes in:
Cluster.cpu). A rank's work: per message through TCP alpha_net and beta_tcp per byte it sends
or receives; through shared memory alpha_shm and beta_shm per byte it passes on (its send and
its receive together); gamma per byte it reduces; `mem` for the part of a host's working set
(its ranks' buffers and what they stage, 2 S each) beyond the cache.
"""

import math

from hora.cost_model.cluster import handoffs
from hora.cost_model.params import costs, phase

RING_THRESHOLD = 512 * 1024      # HORA_RING_THRESHOLD: above it the ring, up to it recursive doubling
SHM_RING_THRESHOLD = 4 * 1024    # HORA_SHM_RING_THRESHOLD: the same inside one host


def working_set(cluster, size):
    """Bytes a host's ranks touch in an allreduce of `size`: each its buffer and its staging."""
    return cluster.ranks_per_host * 2 * size


def tcp(sent, received, messages=1):
    """A process's work for TCP messages."""
    return costs(alpha_net=messages, beta_tcp=sent + received)


def shm(cluster, nbytes, size, messages=1):
    """A rank's work passing `nbytes` through shared memory (its send and receive) in an allreduce
    of `size`."""
    hit = cluster.cached(working_set(cluster, size))
    return costs(alpha_shm=messages, beta_shm=hit * nbytes, mem=(1 - hit) * nbytes)


def reduction(cluster, nbytes, size):
    """A rank's work adding `nbytes` into its accumulator in an allreduce of `size`."""
    hit = cluster.cached(working_set(cluster, size))
    return costs(gamma=hit * nbytes, mem=(1 - hit) * nbytes)


def ring(cluster, size):
    """Ring allreduce over all ranks: 2 (n-1) steps of S/n, the first n-1 reducing. Across hosts,
    H edges of the ring are TCP (one per host link and direction) and the rest shared memory."""
    n, hosts, per_host = cluster.ranks, cluster.hosts, cluster.ranks_per_host
    if n == 1:
        return []
    m = size / n
    if hosts == 1:
        busiest = shm(cluster, m, size)
        everyone = n * busiest
        links = ()
    else:
        # A rank at a host's edge sends (or receives) over TCP and does the other half through
        # shared memory; with one rank per host it does both over TCP.
        busiest = tcp(m, m) if per_host == 1 else tcp(m, 0) + 0.5 * shm(cluster, m, size)
        everyone = hosts * tcp(m, m) + (n - hosts) * shm(cluster, m, size)
        links = (costs(wire=cluster.wire_seconds(m)),)
    reduce = reduction(cluster, m, size)
    handed = handoffs(2 * m)  # each rank passes m on and takes m in
    return phase(links, **cluster.cpu(busiest + reduce, everyone + n * reduce, n, handed), times=n - 1) + \
        phase(links, **cluster.cpu(busiest, everyone, n, handed), times=n - 1)


def exchange_round(cluster, crosses, size, ranks, message):
    """`ranks` ranks each swap `message` bytes with a partner and reduce it; across hosts all of a
    host's ranks cross its link at once."""
    if crosses:
        busiest = tcp(message, message)
        links = (costs(wire=cluster.wire_seconds(message * min(ranks, cluster.ranks_per_host))),)
    else:
        busiest, links = shm(cluster, message, size), ()
    busiest = busiest + reduction(cluster, message, size)
    handed = handoffs(2 * message)
    on_a_host = min(ranks, cluster.ranks_per_host)  # of the ranks that swap
    return phase(links, **cluster.cpu(busiest, ranks * busiest, cluster.ranks, handed,
                                      host=(cluster.ranks_per_host, on_a_host * busiest, handed)))


def recursive_doubling(cluster, size):
    """log2 p exchanges of the whole message, each reduced (p the largest power of two <= n); for n
    not a power of two a fold before and after (the extra ranks hand theirs in, then get it back)."""
    n, per_host = cluster.ranks, cluster.ranks_per_host
    if n == 1:
        return []
    rounds = int(math.floor(math.log2(n)))
    total = []
    for k in range(rounds):
        total += exchange_round(cluster, cluster.hosts > 1 and 2 ** k >= per_host, size, 2 ** rounds, size)
    extra = n - 2 ** rounds
    if extra:  # in, then out: half an exchange each, counted as one
        total += 2 * exchange_round(cluster, cluster.hosts > 1, size, extra, size / 2)
    return total


def hierarchical(cluster, size):
    """Reduce-scatter inside each host (a ring of L over shared memory), an allreduce of the S/L
    slice among the H ranks at each position (the L positions at once, so each host's link
    carries L slices), an allgather inside each host."""
    hosts, per_host, n = cluster.hosts, cluster.ranks_per_host, cluster.ranks
    if hosts == 1 or per_host == 1:
        return flat(cluster, size)
    slice_bytes = size / per_host
    local = shm(cluster, slice_bytes, size)
    reduce = reduction(cluster, slice_bytes, size)
    handed = handoffs(2 * slice_bytes)
    scatter = phase(**cluster.cpu(local + reduce, n * (local + reduce), n, handed), times=per_host - 1)
    gather = phase(**cluster.cpu(local, n * local, n, handed), times=per_host - 1)
    if slice_bytes > RING_THRESHOLD:
        m = slice_bytes / hosts
        links = (costs(wire=cluster.wire_seconds(m * per_host)),)
        step, handed = tcp(m, m), handoffs(2 * m)
        reducing = step + reduction(cluster, m, size)
        across = phase(links, **cluster.cpu(reducing, n * reducing, n, handed), times=hosts - 1) + \
            phase(links, **cluster.cpu(step, n * step, n, handed), times=hosts - 1)
    else:
        across = math.ceil(math.log2(hosts)) * exchange_round(cluster, True, size, n, slice_bytes)
    return scatter + across + gather


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
