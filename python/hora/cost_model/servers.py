"""The phases (params.py) of a parameter-server exchange: W workers (every rank of the Cluster),
K servers on hosts of their own, float32 tensors sharded as src/ps/sharding.cc does.

What hora's client does (src/ps/client.cc), and so what the formulas say:
- a worker runs its exchange with every server (its push, then that server's reply) on a thread
  of its own, so its pushes to the K servers go at once. In ps-sync a server answers once all W
  pushes of the step are in: the pushes, the sums, then the replies, each way as long as the
  busiest of a server's link (W shards), a worker host's (its workers' whole gradients) and the
  cores (TCP's work at both ends).
- in ps-async a server applies each push as it arrives and answers it at once. Workers that
  exchange back to back from a common start stay together (each push takes as long as the
  others sharing the server's link), so their steps keep the pushes-then-replies shape; the
  updates (an SGD step: two passes over the shard) overlap the pushes still arriving.
Each push and each reply is a message (alpha_ps) at both ends.
"""

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


def _push(cluster, servers, shard_bytes, server_extra=None):
    """One way of an exchange (the pushes; the replies are the same the other way): each server
    receives W shards, each worker sends its whole gradient; the lanes are a server's link, a
    worker host's link, a server's core, a worker's core, and everyone's work over shared cores.
    `server_extra`: more work a server does while its pushes arrive (ps-async's updates)."""
    workers, total, biggest = cluster.ranks, sum(shard_bytes), max(shard_bytes)
    server = costs(beta_tcp=workers * biggest, alpha_ps=workers)
    if server_extra is not None:
        server = server + server_extra
    worker = costs(beta_tcp=total, alpha_ps=servers)
    everyone = costs(beta_tcp=2 * workers * total, alpha_ps=2 * workers * servers)
    if server_extra is not None:
        everyone = everyone + servers * server_extra
    return phase((costs(wire=cluster.wire_seconds(workers * biggest)),
                  costs(wire=cluster.wire_seconds(cluster.ranks_per_host * total))),
                 (worker, *cluster.cpu_lanes(server, everyone, workers + servers)))


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
    """One ps-async step of a worker among W that started together: the pushes, each applied by
    its server as it arrives (while the others still arrive), the replies."""
    shard_bytes = [e * FLOAT_BYTES for e in plan_shards(tensor_elements, servers)]
    update = _server_reduction(cluster, shard_bytes, 2)
    return _push(cluster, servers, shard_bytes, update) + _push(cluster, servers, shard_bytes)


PS_MODES = {"ps-sync": ps_sync, "ps-async": ps_async}
