"""The phases (params.py) of a parameter-server exchange: W workers (every rank of the Cluster),
K servers on hosts of their own, float32 tensors sharded as src/ps/sharding.cc does.

What hora's client does (src/ps/client.cc), and so what the formulas say:
- a worker runs its exchange with every server (its push, then that server's reply) on a thread
  of its own, so its pushes to the K servers go at once. In ps-sync a server answers once all W
  pushes of the step are in: the pushes, the sums, then the replies, each way as long as the
  busiest of a server's link (W shards), a worker host's (its workers' whole gradients) and the
  cores (TCP's work at both ends).
- in ps-async a server applies each push as it arrives and answers it at once (an SGD update:
  two passes over the shard), and nobody waits for anybody, so how far apart the workers'
  exchanges lie is nobody's choice: in step (ps-sync's shape: all pushes, then all replies, the
  updates while the pushes arrive), or staggered (one phase in which a server's link carries W
  shards each way at once, the cores do both ways' work and the updates, and each worker's own
  push and reply go one after the other over its link), or anything between. Links that share
  fairly keep whatever offset the workers have, so it wanders; the model takes the mean of the
  two extremes, which is exact for two workers whose offset is uniformly distributed (at offset
  d <= D, D one push alone, a step takes 4 D - 2 d: in step 4 D, staggered 2 D).
Each push and each reply is a message (alpha_ps) at both ends.
"""

from hora.cost_model.cluster import handoffs
from hora.cost_model.params import costs, phase

FLOAT_BYTES = 4


def plan_shards(tensor_elements, servers):
    """Elements per server, as src/ps/sharding.cc places them: a tensor larger than total / K is
    split evenly over all servers, the others (largest first) go whole to the least loaded."""
    if servers < 1:
        raise ValueError(f"need at least 1 server, got {servers}")
    total = sum(tensor_elements)
    load = [0] * servers
    for n in sorted(tensor_elements, reverse=True):
        if servers > 1 and n * servers > total:
            for s in range(servers):
                load[s] += n // servers + (1 if s < n % servers else 0)
        else:
            load[load.index(min(load))] += n
    return load


def _cpu(cluster, servers, shard_bytes, server, worker, everyone, ways=1):
    """A phase's CPU side (Cluster.cpu) for a server's work, a worker's and everyone's, `ways` of
    the exchange at once. On shared cores the server waits most: its W shards. With cores per
    host, a server has its host to itself, and a worker host's workers share its cores, each
    worker's hand-offs its whole gradient to the K servers."""
    workers = cluster.ranks
    server_handed = ways * handoffs(workers * max(shard_bytes), messages=workers)
    worker_handed = ways * handoffs(sum(shard_bytes), messages=servers)
    cpu = cluster.cpu(server, everyone, workers + servers, server_handed,
                      host=(cluster.ranks_per_host, cluster.ranks_per_host * worker, worker_handed))
    return dict(cpu, cores=(worker, *cpu["cores"]))


def _one_way(cluster, servers, shard_bytes):
    """The cores' work of one way of an exchange (the pushes; the replies are the same the other
    way), as (a server's, a worker's, everyone's): each server receives W shards, each worker
    sends its whole gradient, and every byte passes TCP at both ends."""
    workers, total, biggest = cluster.ranks, sum(shard_bytes), max(shard_bytes)
    return (costs(beta_tcp=workers * biggest, alpha_ps=workers), costs(beta_tcp=total, alpha_ps=servers),
            costs(beta_tcp=2 * workers * total, alpha_ps=2 * workers * servers))


def _links(cluster, shard_bytes):
    """The link lanes of one way: a server's link (W shards), a worker host's (its workers'
    whole gradients)."""
    return (costs(wire=cluster.wire_seconds(cluster.ranks * max(shard_bytes))),
            costs(wire=cluster.wire_seconds(cluster.ranks_per_host * sum(shard_bytes))))


def _push(cluster, servers, shard_bytes, update=None):
    """One way of an exchange in step (the pushes; the replies are the same the other way): the
    links, a server's core, a worker's core, and everyone's work over shared cores. `update`:
    work a server does while its pushes arrive (ps-async's)."""
    server, worker, everyone = _one_way(cluster, servers, shard_bytes)
    if update is not None:
        server, everyone = server + update, everyone + servers * update
    return phase(_links(cluster, shard_bytes), **_cpu(cluster, servers, shard_bytes, server, worker, everyone))


def _staggered(cluster, servers, shard_bytes, update):
    """A ps-async step whose workers' exchanges lie apart: one worker's push crosses a link while
    another's reply crosses it the other way; a worker's own push and reply go in turn."""
    server, worker, everyone = (2 * c for c in _one_way(cluster, servers, shard_bytes))
    own_turns = costs(wire=cluster.wire_seconds(2 * sum(shard_bytes)))
    return phase((*_links(cluster, shard_bytes), own_turns),
                  **_cpu(cluster, servers, shard_bytes, server + update, worker, everyone + servers * update, ways=2))


def _server_reduction(cluster, shard_bytes, passes):
    """A server's `passes` over the W shards it received (a sum; an SGD update takes 2)."""
    reduced = cluster.ranks * max(shard_bytes)
    hit = cluster.cached(reduced)
    return passes * costs(gamma=hit * reduced, mem=(1 - hit) * reduced)


def ps_sync(cluster, tensor_elements, servers):
    """One ps-sync step: the pushes to every server at once, each server's sum once all are in,
    the replies."""
    shard_bytes = [e * FLOAT_BYTES for e in plan_shards(tensor_elements, servers)]
    push = _push(cluster, servers, shard_bytes)
    return push + phase(cores=(_server_reduction(cluster, shard_bytes, 1),)) + push


def ps_async(cluster, tensor_elements, servers):
    """One ps-async step of a worker among W: the mean of a step in step with the others (the
    pushes, each applied as it arrives, then the replies) and of a staggered one."""
    shard_bytes = [e * FLOAT_BYTES for e in plan_shards(tensor_elements, servers)]
    update = _server_reduction(cluster, shard_bytes, 2)
    in_step = _push(cluster, servers, shard_bytes, update) + _push(cluster, servers, shard_bytes)
    return [p._replace(times=p.times / 2) for p in in_step + _staggered(cluster, servers, shard_bytes, update)]


PS_MODES = {"ps-sync": ps_sync, "ps-async": ps_async}
