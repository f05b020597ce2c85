"""hora.cost_model (docs/parameter_servers.md, "Cost model") against formulas written out by hand
here for small cases: the cost vectors of each exchange, the fit recovering known parameters
from synthetic measurements, the recommendation switching where the formulas say, the CLI."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from hora.cost_model import exchanges, fit, predict, servers
from hora.cost_model.cluster import Cluster
from hora.cost_model.params import OVERLAP, Params

# Every term distinct and of a realistic size, so that a term counted twice or left out shows.
P = Params(alpha_net=40e-6, wire=1.1, beta_tcp=2e-10, alpha_shm=5e-6, beta_shm=1.5e-10, gamma=8e-11, mem=1e-10,
           alpha_ps=70e-6, sched=20e-6)
MiB = 2**20
CHUNK = 256 * 1024  # HORA_CHUNK_BYTES's default: a hand-off between processes per chunk
BIG_CACHE = 2**40  # every working set in the cache: the tests of the other terms leave out `mem`


def link(nbytes, gbit):
    """Seconds on the wire, with P's slowdown."""
    return P.wire * nbytes * 8 / (gbit * 1e9)


def overlap(wire, cpu):
    """A phase whose link and cores work at once: the p-norm of their times (p = OVERLAP)."""
    if wire <= 0 or cpu <= 0:
        return max(wire, cpu)
    return (wire ** OVERLAP + cpu ** OVERLAP) ** (1 / OVERLAP)


def test_ring_across_four_hosts_is_as_slow_as_the_wire_or_the_cpu():
    # n = 4, one rank per host: 6 steps of m = S/4, 3 of them reducing m; in each, a rank sends and
    # receives m over TCP while its link carries m each way, the two overlapped.
    s = 64 * MiB
    m = s / 4
    cpu = P.alpha_net + P.beta_tcp * 2 * m
    for gbit in (10, 100):  # at 10 Gbit/s the wire binds, at 100 the CPU
        c = Cluster(hosts=4, ranks_per_host=1, link_gbit=gbit, cache_bytes=BIG_CACHE)
        hand = 3 * overlap(link(m, gbit), cpu + P.gamma * m) + 3 * overlap(link(m, gbit), cpu)
        assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)
    assert link(m, 10) > cpu + P.gamma * m and link(m, 100) < cpu  # both regimes were taken


def test_ring_on_one_host_spreads_the_ranks_over_shared_cores():
    # 4 ranks on 2 cores: all four ranks' work over 2 cores, twice one rank's; and each step a
    # rank passes on and takes in m = 2 MiB, 16 chunks, each finding its peer off a core half the
    # time (2 of 4 processes run), for `sched` each.
    c, s = Cluster(hosts=1, ranks_per_host=4, link_gbit=1, cores=2, cache_bytes=BIG_CACHE), 8 * MiB
    m = s / 4
    wait = 0.5 * 16 * P.sched
    hand = 3 * (2 * (P.alpha_shm + P.beta_shm * m + P.gamma * m) + wait) + \
        3 * (2 * (P.alpha_shm + P.beta_shm * m) + wait)
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_ring_over_hosts_of_two_mixes_tcp_and_shared_memory():
    # 2 hosts x 2 ranks at 100 Gbit/s (the CPU binds): a rank at a host's edge sends over TCP and
    # receives through shared memory (half of a shared-memory step's work), or the other way.
    c, s = Cluster(hosts=2, ranks_per_host=2, link_gbit=100, cache_bytes=BIG_CACHE), 16 * MiB
    m = s / 4
    edge = P.alpha_net + P.beta_tcp * m + 0.5 * (P.alpha_shm + P.beta_shm * m)
    hand = 3 * overlap(link(m, 100), edge + P.gamma * m) + 3 * overlap(link(m, 100), edge)
    assert link(m, 100) < edge
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_shared_cores_take_everyone_s_work_but_not_the_wire():
    # 8 ranks on 4 hosts of 2 sharing 2 cores: each step, 4 TCP edges (m sent and received) and 4
    # shared-memory edges, all spread over 2 cores; at 1 Gbit/s the wire binds, at 100 the cores.
    # Each step's 2 MiB in and 2 MiB out, 16 chunks, wait off a core 3/4 of the time (2 of 8 run),
    # and the waits stall the link too: added, not overlapped.
    s = 16 * MiB
    m = s / 8
    everyone = (4 * (P.alpha_net + P.beta_tcp * 2 * m) + 4 * (P.alpha_shm + P.beta_shm * m)) / 2
    wait = 0.75 * 16 * P.sched
    for gbit in (1, 100):
        c = Cluster(hosts=4, ranks_per_host=2, link_gbit=gbit, cores=2, cache_bytes=BIG_CACHE)
        hand = 7 * (overlap(link(m, gbit), everyone + 8 * P.gamma * m / 2) + wait) + \
            7 * (overlap(link(m, gbit), everyone) + wait)
        assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)
    assert link(m, 1) > everyone + 4 * P.gamma * m and link(m, 100) < everyone


def test_the_wait_for_a_core_grows_with_processes_per_core():
    # L ranks of one host on 2 cores, a ring of 4 MiB: each step a rank passes on and takes in
    # m = S/L, 2 m / CHUNK hand-offs, each off a core for the share 1 - 2 / L of the time. Without
    # `sched`, the same ring: what is left is the wait alone.
    s, no_wait = 4 * MiB, Params(**{**P.to_json(), "sched": 0.0})
    waits = {}
    for ranks in (2, 3, 4, 8):
        c = Cluster(hosts=1, ranks_per_host=ranks, link_gbit=1, cores=2, cache_bytes=BIG_CACHE)
        waits[ranks] = P.seconds(exchanges.ring(c, s)) - no_wait.seconds(exchanges.ring(c, s))
        m = s / ranks
        hand = 2 * (ranks - 1) * (1 - 2 / ranks) * max(1, 2 * m / CHUNK) * P.sched
        assert waits[ranks] == pytest.approx(hand, abs=1e-12), ranks
    assert waits[2] == 0 and waits[3] < waits[4] < waits[8]


def test_the_wait_for_a_core_vanishes_with_cores_to_spare():
    # A real cluster: hosts of 4 ranks with 4 or more cores each predict what a core per process
    # does, for every allreduce and both parameter-server modes; with 2 cores, more.
    s, elements = 16 * MiB, 16 * MiB // 4
    layouts = {cores: Cluster(hosts=4, ranks_per_host=4, link_gbit=10, cores_per_host=cores)
               for cores in (None, 4, 16, 2)}
    for name, algorithm in exchanges.ALLREDUCE_ALGORITHMS.items():
        spare = [P.seconds(algorithm(c, s)) for cores, c in layouts.items() if cores != 2]
        assert spare == pytest.approx([spare[0]] * 3), name
        assert P.seconds(algorithm(layouts[2], s)) > spare[0] * 1.01, name
    for mode, exchange in servers.PS_MODES.items():
        spare = [P.seconds(exchange(c, [elements], 2)) for cores, c in layouts.items() if cores != 2]
        assert spare == pytest.approx([spare[0]] * 3), mode
        assert P.seconds(exchange(layouts[2], [elements], 2)) > spare[0], mode


def test_ring_over_hosts_with_cores_of_their_own():
    # 2 hosts x 4 ranks, 2 cores per host, 100 Gbit/s: a host's cores take its ranks' work (one
    # TCP edge out, one in, 3 shared-memory edges, 4 reductions) over 2; each step's 2 m of
    # hand-offs (m = S/8) wait off a core half the time (2 of the host's 4 ranks run).
    c, s = Cluster(hosts=2, ranks_per_host=4, link_gbit=100, cores_per_host=2, cache_bytes=BIG_CACHE), 16 * MiB
    m = s / 8
    host = P.alpha_net + P.beta_tcp * 2 * m + 3 * (P.alpha_shm + P.beta_shm * m)
    wait = 0.5 * (2 * m / CHUNK) * P.sched
    hand = 7 * (overlap(link(m, 100), (host + 4 * P.gamma * m) / 2) + wait) + \
        7 * (overlap(link(m, 100), host / 2) + wait)
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_ps_sync_workers_sharing_their_host_s_cores_wait_for_them():
    # 8 workers on 2 hosts of 4 with 2 cores each, 2 servers (hosts of their own), 4 MiB, 100
    # Gbit/s: each way a server's link and a worker host's carry 16 MiB, a server's core (16 MiB, 8
    # messages) outweighs a worker host's (4 workers' 4 MiB and 2 messages over 2 cores), and each
    # worker's hand-offs (its 4 MiB, 16 chunks) wait off a core half the time.
    c, elements = Cluster(hosts=2, ranks_per_host=4, link_gbit=100, cores_per_host=2, cache_bytes=BIG_CACHE), MiB
    shard = 2 * MiB
    server = P.beta_tcp * 8 * shard + 8 * P.alpha_ps
    worker_host = 4 * (P.beta_tcp * 4 * MiB + 2 * P.alpha_ps) / 2
    assert server > worker_host
    one_way = overlap(link(16 * MiB, 100), server) + 0.5 * 16 * P.sched
    assert P.seconds(servers.ps_sync(c, [elements], 2)) == pytest.approx(2 * one_way + P.gamma * 8 * shard)


def test_cores_are_shared_or_per_host_not_both():
    with pytest.raises(ValueError):
        Cluster(hosts=2, ranks_per_host=2, link_gbit=1, cores=2, cores_per_host=2)
    with pytest.raises(ValueError):
        Cluster(hosts=2, ranks_per_host=2, link_gbit=1, cores_per_host=0)


def test_recursive_doubling_on_two_hosts_of_two():
    # Round 1: partner on the same host (shared memory). Round 2: partner on the other host, and
    # both ranks of a host cross at once, so the link carries 2 S.
    c, s = Cluster(hosts=2, ranks_per_host=2, link_gbit=1, cache_bytes=BIG_CACHE), 64 * 1024
    hand = (P.alpha_shm + P.beta_shm * s + P.gamma * s) + \
        overlap(link(2 * s, 1), P.alpha_net + P.beta_tcp * 2 * s + P.gamma * s)
    assert P.seconds(exchanges.recursive_doubling(c, s)) == pytest.approx(hand)


def test_recursive_doubling_folds_three_ranks():
    # One round of 2, then the third rank's message in and back out, each half an exchange.
    c, s = Cluster(hosts=3, ranks_per_host=1, link_gbit=100, cache_bytes=BIG_CACHE), 1024
    round_ = overlap(link(s, 100), P.alpha_net + P.beta_tcp * 2 * s + P.gamma * s)
    half = overlap(link(s / 2, 100), P.alpha_net + P.beta_tcp * s + P.gamma * s / 2)
    assert P.seconds(exchanges.recursive_doubling(c, s)) == pytest.approx(round_ + 2 * half)


def test_hierarchical_on_two_hosts_of_four():
    # Reduce-scatter of 4 slices of S/4 inside the host (3 steps), a ring of 2 hosts on each slice
    # (2 steps of S/8; 4 slices cross each link at once), an allgather inside (3 steps).
    c, s = Cluster(hosts=2, ranks_per_host=4, link_gbit=10, cache_bytes=BIG_CACHE), 64 * MiB
    inside = P.alpha_shm + P.beta_shm * s / 4
    m = s / 8
    step = P.alpha_net + P.beta_tcp * 2 * m
    across = overlap(link(4 * m, 10), step + P.gamma * m) + overlap(link(4 * m, 10), step)
    hand = 3 * (inside + P.gamma * s / 4) + across + 3 * inside
    assert P.seconds(exchanges.hierarchical(c, s)) == pytest.approx(hand)


def test_data_beyond_the_cache_costs_the_memory_term():
    # 2 ranks on one host, S = 16 MiB: each touches its buffer and its staging (2 S), 64 MiB in
    # all, twice a 32 MiB cache: half of every byte copied or reduced pays `mem` on top.
    c, s = Cluster(hosts=1, ranks_per_host=2, link_gbit=1, cache_bytes=32 * MiB), 16 * MiB
    m = s / 2
    copy = P.alpha_shm + 0.5 * P.beta_shm * m + 0.5 * P.mem * m
    hand = (copy + 0.5 * P.gamma * m + 0.5 * P.mem * m) + copy
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_hora_picks_as_its_plan_does():
    same = lambda a, b: P.seconds(a) == pytest.approx(P.seconds(b))
    two_by_two = Cluster(hosts=2, ranks_per_host=2, link_gbit=1)
    assert same(exchanges.hora_allreduce(two_by_two, 1 * MiB), exchanges.hierarchical(two_by_two, 1 * MiB))
    assert same(exchanges.hora_allreduce(two_by_two, 512 * 1024), exchanges.recursive_doubling(two_by_two, 512 * 1024))
    assert not same(exchanges.hierarchical(two_by_two, 1 * MiB), exchanges.ring(two_by_two, 1 * MiB))
    one_host = Cluster(hosts=1, ranks_per_host=2, link_gbit=1)
    assert same(exchanges.hora_allreduce(one_host, 8192), exchanges.ring(one_host, 8192))
    assert same(exchanges.flat(two_by_two, 1 * MiB), exchanges.ring(two_by_two, 1 * MiB))


def test_shards_as_the_servers_place_them():
    # 10 > 17 / 2: split 5 + 5; then 3, 3, 1 whole to the least loaded (ties: the first).
    assert servers.plan_shards([10, 3, 3, 1], 2) == [9, 8]
    assert servers.plan_shards([7, 5], 1) == [12]
    assert servers.plan_shards([9], 4) == [3, 2, 2, 2]


def test_ps_sync_two_servers():
    # W = 4 workers on 4 hosts, K = 2 servers, one tensor of 4 MiB: shards of 2 MiB. Each way the
    # busiest of: a server's link (4 shards), a worker's link (4 MiB), a server's core (receiving
    # 4 shards, 4 messages), a worker's core (sending 4 MiB, 2 messages); between them a
    # server sums its 4 shards.
    c, elements = Cluster(hosts=4, ranks_per_host=1, link_gbit=1, cache_bytes=BIG_CACHE), 4 * MiB // 4
    shard = elements * 4 / 2
    one_way = overlap(max(link(4 * shard, 1), link(4 * MiB, 1)),
                      max(P.beta_tcp * 4 * shard + 4 * P.alpha_ps, P.beta_tcp * 4 * MiB + 2 * P.alpha_ps))
    hand = 2 * one_way + P.gamma * 4 * shard
    assert P.seconds(servers.ps_sync(c, [elements], 2)) == pytest.approx(hand)


def test_ps_sync_pushes_to_every_server_at_once():
    # Only the wire, 1 Gbit/s: a byte takes 8 ns. 16 MiB from each of 4 workers on 4 hosts.
    c, elements = Cluster(hosts=4, ranks_per_host=1, link_gbit=1), 16 * MiB // 4
    only_wire = Params(wire=1.0)
    ns = 8e-9
    # One server: its link carries 4 x 16 MiB in, then 4 x 16 MiB out.
    assert only_wire.seconds(servers.ps_sync(c, [elements], 1)) == pytest.approx((64 + 64) * MiB * ns)
    # Two servers, shards of 8 MiB, pushed at once: each server's link 4 x 8 MiB each way (a
    # worker's link 16 MiB), half of one server's time, no matter that a shard exceeds a socket
    # buffer (the pushes went in turn before: 4 x (4 + 8) MiB in).
    assert only_wire.seconds(servers.ps_sync(c, [elements], 2)) == pytest.approx((32 + 32) * MiB * ns)
    # Eight servers, shards of 2 MiB: a server's link carries 4 x 2 = 8 MiB each way, but each
    # worker's own link its whole 16 MiB: the worker binds.
    assert only_wire.seconds(servers.ps_sync(c, [elements], 8)) == pytest.approx((16 + 16) * MiB * ns)
    # Two workers per host (8 on 4 hosts), two servers: a server's link 8 x 8 = 64 MiB each way, a
    # host's 2 x 16 = 32 MiB: the servers bind again.
    two_per_host = Cluster(hosts=4, ranks_per_host=2, link_gbit=1)
    assert only_wire.seconds(servers.ps_sync(two_per_host, [elements], 2)) == pytest.approx((64 + 64) * MiB * ns)


def test_ps_async_is_the_mean_of_a_step_in_step_and_a_staggered_one():
    # 4 workers on 2 hosts, 8 servers, 1 MiB at 100 Gbit/s, every process on a core of its own:
    # the cores bind. In step: the pushes (a server receives 4 shards of 128 KiB and applies them,
    # SGD: 2 passes; a worker sends 1 MiB), then the replies. Staggered: one phase of both ways
    # at once, the updates in it.
    c, elements = Cluster(hosts=2, ranks_per_host=2, link_gbit=100, cache_bytes=BIG_CACHE), 1 * MiB // 4
    shard = elements * 4 / 8
    server = P.beta_tcp * 4 * shard + 4 * P.alpha_ps
    worker = P.beta_tcp * MiB + 8 * P.alpha_ps
    update = 2 * P.gamma * 4 * shard
    wire = max(link(4 * shard, 100), link(2 * MiB, 100))  # a server's link, a host's (2 workers)
    in_step = overlap(wire, max(worker, server + update)) + overlap(wire, max(worker, server))
    staggered = overlap(max(wire, link(2 * MiB, 100)), max(2 * worker, 2 * server + update))
    assert P.seconds(servers.ps_async(c, [elements], 8)) == pytest.approx((in_step + staggered) / 2)


def test_ps_async_staggered_halves_a_server_s_link_but_not_a_worker_s_turns():
    # Only the wire, 1 Gbit/s: a byte takes 8 ns. 16 MiB from each of 8 workers on 8 hosts.
    c, elements = Cluster(hosts=8, ranks_per_host=1, link_gbit=1), 16 * MiB // 4
    only_wire = Params(wire=1.0)
    ns = 8e-9
    # One server: in step its link carries 8 x 16 MiB in, then out (ps-sync's time); staggered,
    # both at once: half of it. The mean: 3/4 of ps-sync's.
    assert only_wire.seconds(servers.ps_sync(c, [elements], 1)) == pytest.approx(2 * 8 * 16 * MiB * ns)
    assert only_wire.seconds(servers.ps_async(c, [elements], 1)) == pytest.approx(1.5 * 8 * 16 * MiB * ns)
    # Eight servers: a server's link 8 x 2 MiB each way, but each worker pushes its 16 MiB and then
    # receives its 16 MiB, in step or not: the worker binds, as in ps-sync.
    assert only_wire.seconds(servers.ps_async(c, [elements], 8)) == pytest.approx(2 * 16 * MiB * ns)
    assert only_wire.seconds(servers.ps_sync(c, [elements], 8)) == pytest.approx(2 * 16 * MiB * ns)


def test_fusion_buffers():
    # 40 + 80 bytes fit in 130; the next 120 would not.
    assert predict.fusion_buffers([10, 20, 30], threshold=130) == [120, 120]
    assert predict.fusion_buffers([40], threshold=100) == [160]  # a tensor larger than the threshold alone


def synthetic_records(truth, noise=0.0, seed=0):
    """Measurements made from hand-written formulas (not the package's), with relative noise: the
    reduce kernel, 2 ranks on one host, 2 hosts x 1 rank at 1 and 10 Gbit/s and uncapped, ps-sync
    with 2 workers and 1 server on 2 cores; the 32 MiB cache of the records' default."""
    rng = np.random.default_rng(seed)
    jitter = lambda t: t * (1 + noise * rng.standard_normal())
    sizes = [4096 * 4 ** i for i in range(8)]  # 4 KiB .. 64 MiB
    cache = 32 * MiB
    hit = lambda working_set: min(1.0, cache / working_set)
    wire = lambda b, g: truth.wire * b * 8 / (g * 1e9) if g else 0.0
    # Copying or reducing b bytes of a working set of w: in the cache, or not.
    copy = lambda b, w: truth.beta_shm * hit(w) * b + truth.mem * (1 - hit(w)) * b
    add = lambda b, w: truth.gamma * hit(w) * b + truth.mem * (1 - hit(w)) * b
    tcp = lambda b: truth.alpha_net + truth.beta_tcp * 2 * b  # b sent and b received

    def net(s, g):  # 2 hosts x 1 rank, working set 2 S: one exchange up to 512 KiB, else the ring
        if s <= 512 * 1024:
            return overlap(wire(s, g), tcp(s) + add(s, 2 * s))
        m = s / 2
        return overlap(wire(m, g), tcp(m) + add(m, 2 * s)) + overlap(wire(m, g), tcp(m))

    def shm(s):  # 2 ranks on one host, working set 2 x 2 S
        if s <= 4096:
            return truth.alpha_shm + copy(s, 4 * s) + add(s, 4 * s)
        m = s / 2
        return 2 * (truth.alpha_shm + copy(m, 4 * s)) + add(m, 4 * s)

    def ps(s, g):  # 2 workers, 1 server: its link 2 S each way, its core 2 S and 2 messages; the 3
        # processes share 2 cores (everyone's work over them is the server's), so each of the
        # server's hand-offs (2 messages, or its 2 S in chunks) finds its peer off a core a third
        # of the time and waits
        one_way = overlap(max(wire(2 * s, g), wire(s, g)),
                          max(truth.beta_tcp * s + truth.alpha_ps, truth.beta_tcp * 2 * s + 2 * truth.alpha_ps))
        wait = max(2, 2 * s / CHUNK) / 3 * truth.sched
        return 2 * (one_way + wait) + add(2 * s, 2 * s)

    rows = lambda f: [{"bytes": s, "seconds": jitter(f(s))} for s in sizes]
    records = [{"kind": "reduce", "rows": rows(lambda s: add(s, 2 * s))},
               {"kind": "allreduce", "algorithm": "auto", "hosts": 1, "ranks_per_host": 2, "rows": rows(shm)}]
    for g in (1, 10, None):
        records.append({"kind": "allreduce", "algorithm": "auto", "hosts": 2, "ranks_per_host": 1, "link_gbit": g,
                        "rows": rows(lambda s: net(s, g))})
    for g in (1, 10):
        records.append({"kind": "ps-sync", "hosts": 2, "ranks_per_host": 1, "servers": 1, "link_gbit": g, "cores": 2,
                        "rows": rows(lambda s: ps(s, g))})
    return records


def test_fit_recovers_known_parameters():
    fitted, used = fit.fit_params(synthetic_records(P))
    assert used == {"reduction": 8, "shared memory": 8, "network": 24, "servers and waits": 16}
    for name, value in P.to_json().items():
        assert getattr(fitted, name) == pytest.approx(value, rel=1e-6), name


def test_fit_under_noise_stays_close():
    fitted, _ = fit.fit_params(synthetic_records(P, noise=0.01, seed=3))
    for name in ("alpha_net", "wire", "beta_tcp", "beta_shm", "gamma", "mem", "alpha_ps", "sched"):
        assert getattr(fitted, name) == pytest.approx(getattr(P, name), rel=0.1), name


def test_fit_leaves_out_small_messages_across_hosts_when_asked():
    # Rows across capped links below 256 KiB made 10 times faster (a tbf burst): left out, the fit
    # is exact. The uncapped link's rows are all kept.
    records = synthetic_records(P)
    for r in records:
        for row in r["rows"]:
            if r.get("link_gbit") and row["bytes"] < 256 * 1024:
                row["seconds"] /= 10
    fitted, used = fit.fit_params(records, min_network_bytes=256 * 1024)
    assert used["network"] == 8 + 2 * 5 and used["shared memory"] == 8
    for name, value in P.to_json().items():
        if name != "alpha_ps":  # it binds only in the small exchanges left out
            assert getattr(fitted, name) == pytest.approx(value, rel=1e-6), name


def test_recommendation_switches_where_the_formulas_cross():
    # Only the allreduce's message latency (a) and the wire (8 Gbit/s: a byte takes 1 ns). 2 hosts x
    # 1 rank, one server: an allreduce of S <= 512 KiB is one exchange, its message and its S ns on
    # the wire overlapped, (S^p + a^p)^(1/p) ns; ps-sync moves 2 S into the server, then 2 S out,
    # 4 S ns. ps-sync wins below 4 S = (S^p + a^p)^(1/p), S* = a / (4^p - 1)^(1/p).
    a = 1e-3
    params = Params(alpha_net=a, wire=1.0)
    crossing = a / (4 ** OVERLAP - 1) ** (1 / OVERLAP) / 1e-9  # 251,315 bytes for p = 3
    below = predict.predict_row(params, [int(crossing * 0.95) // 4], 2, 1, 8.0, max_servers=1)
    above = predict.predict_row(params, [int(crossing * 1.05) // 4], 2, 1, 8.0, max_servers=1)
    assert below.recommended.startswith("ps-sync, 1 server")
    assert above.recommended.startswith("allreduce")


def test_more_servers_only_while_they_pay():
    # 8 workers on 8 hosts, 64 MiB, only the wire (8 ns a byte). With K servers each server's link
    # carries 8 x 64 / K MiB each way, each worker's link 64 MiB: by hand, K = 1, 2, 4 take
    # 1024, 512, 256 MiB in all; from K = 8 on the worker's link binds, 128 MiB, and more servers
    # are no faster (the fewest of the equals wins). With a large per-message cost (each server
    # handles W messages each way whatever K, each worker K), servers beyond W only cost more.
    cluster = Cluster(8, 1, 1.0)
    hand = {k: 2 * max(8 * 64 / k, 64) * MiB * 8e-9 for k in (1, 2, 4, 8, 16, 32)}
    assert hand[1] == pytest.approx(1024 * MiB * 8e-9) and hand[8] == hand[32] == pytest.approx(128 * MiB * 8e-9)
    for k, seconds in hand.items():
        assert Params(wire=1.0).seconds(servers.ps_sync(cluster, [64 * MiB // 4], k)) == pytest.approx(seconds), k
    cheap = predict.best_servers(Params(wire=1.0), cluster, [64 * MiB // 4], "ps-sync", 32)
    costly = predict.best_servers(Params(wire=1.0, alpha_ps=1.0), cluster, [MiB], "ps-sync", 32)
    assert cheap == (pytest.approx(hand[8]), 8) and costly[1] == 8


def cli(*args, check=True):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(root, "python")] + sys.path)
    return subprocess.run([sys.executable, "-m", "hora.cost_model", *args], env=env, capture_output=True,
                          text=True, check=check)


def run_cli(*args):
    return cli(*args).stdout


def test_cli_fits_and_predicts(tmp_path):
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"records": synthetic_records(P)}))
    params = tmp_path / "params.json"
    run_cli("fit", str(records), "--out", str(params))
    assert json.loads(params.read_text())["params"]["alpha_ps"] == pytest.approx(P.alpha_ps, rel=1e-6)
    out = json.loads(run_cli("predict", "--params", str(params), "--sizes", "1000", "250000", "--ranks-per-host", "4",
                             "--link-gbit", "10", "--json"))
    assert [r["ranks"] for r in out["rows"]] == [2 ** k for k in range(1, 11)]
    assert out["bytes"] == 4 * 251000 and all(r["recommended"] for r in out["rows"])
    table = run_cli("predict", "--params", str(params), "--sizes", "1000", "--link-gbit", "1", "--ranks", "2", "8")
    assert table.count("\n| ") == 4 and "| 8 | 8 |" in table  # the header, its rule, 2 rows


def test_cli_takes_each_host_s_cores(tmp_path):
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"params": P.to_json()}))
    auto = {}
    for cores in (None, 4, 2):
        extra = ["--cores-per-host", str(cores)] if cores else []
        out = json.loads(run_cli("predict", "--params", str(params), "--sizes", "4000000", "--ranks-per-host", "4",
                                 "--link-gbit", "10", "--ranks", "8", "--json", *extra))
        assert out["cores_per_host"] == cores
        auto[cores] = out["rows"][0]["seconds"]["auto"]
    assert auto[4] == pytest.approx(auto[None]) and auto[2] > auto[4] * 1.01  # an oversubscribed host is slower
    both = cli("predict", "--params", str(params), "--sizes", "1", "--link-gbit", "1", "--cores", "2",
               "--cores-per-host", "2", check=False)
    assert both.returncode != 0 and "not allowed with" in both.stderr
