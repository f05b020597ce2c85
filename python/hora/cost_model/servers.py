"""Cost vectors (params.py) of a parameter-server exchange: W workers (every rank of the
Cluster), K servers on hosts of their own, float32 tensors sharded as src/ps/sharding.cc does.

What hora's client does (src/ps/client.cc), and so what the formulas say:
- a worker runs its exchange with every server (its push, then that server's reply) on a thread
  of its own, so its pushes to the K servers go at once. In ps-sync a server answers once all W
  pushes of the step are in: the push phase costs what the busier link carries, a server's (W
  shards) or a worker host's (its workers' whole gradients), and the replies the same back.
- in ps-async nobody waits for a round: the workers drift apart and keep every server's link
  busy in both directions at once, so a step costs what the busiest link carries one way.
A server's sum (or its SGD update, two passes) is gamma over W shards; each push and each reply
is a message (alpha_ps) on the worker's side, and the server handles W of each.
"""

from hora.cost_model.params import costs

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


def _link_bytes(cluster, shard_bytes):
    """Bytes per direction on the busiest server link, and on a worker host's link, per step."""
    workers, total = cluster.ranks, sum(shard_bytes)
    return workers * max(shard_bytes), cluster.ranks_per_host * total


def _server_work(cluster, servers, shard_bytes, passes):
    """The busiest server's CPU: receiving, sending and `passes` reductions of W shards, and its
    2 W messages besides the worker's 2 K (a server runs beside the W workers)."""
    processes = cluster.ranks + servers
    stretch = cluster.cpu_stretch(processes)
    biggest = cluster.ranks * max(shard_bytes)
    return stretch * costs(beta_tcp=biggest, gamma=passes * biggest, alpha_ps=2 * servers + 2 * cluster.ranks)


def ps_sync(cluster, tensor_elements, servers):
    """One ps-sync step: the pushes to every server at once, the sums, the replies; each way the
    busier of a server's link and a worker host's."""
    shard_bytes = [e * FLOAT_BYTES for e in plan_shards(tensor_elements, servers)]
    server_link, worker_link = _link_bytes(cluster, shard_bytes)
    push = pull = max(server_link, worker_link)
    return costs(wire=cluster.wire_seconds(push + pull)) + _server_work(cluster, servers, shard_bytes, 1)


def ps_async(cluster, tensor_elements, servers):
    """One ps-async step of a worker among W that all keep pushing: the busiest link, one way."""
    shard_bytes = [e * FLOAT_BYTES for e in plan_shards(tensor_elements, servers)]
    server_link, worker_link = _link_bytes(cluster, shard_bytes)
    return costs(wire=cluster.wire_seconds(max(server_link, worker_link))) + \
        _server_work(cluster, servers, shard_bytes, 2)


PS_MODES = {"ps-sync": ps_sync, "ps-async": ps_async}
