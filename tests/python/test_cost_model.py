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
from hora.cost_model.params import Params

# Every term distinct and of a realistic size, so that a term counted twice or left out shows.
P = Params(alpha_net=40e-6, wire=1.1, beta_tcp=2e-10, alpha_shm=5e-6, beta_shm=1.5e-10, gamma=8e-11, alpha_ps=70e-6)
MiB = 2**20


def link(nbytes, gbit):
    """Seconds on the wire, with P's slowdown."""
    return P.wire * nbytes * 8 / (gbit * 1e9)


def test_ring_across_four_hosts():
    # n = 4, one rank per host: 6 steps of S/4, 3 of them reducing S/4.
    c, s = Cluster(hosts=4, ranks_per_host=1, link_gbit=10), 64 * MiB
    hand = 6 * (P.alpha_net + link(s / 4, 10) + P.beta_tcp * s / 4) + 3 * P.gamma * s / 4
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_ring_on_one_host_uses_shared_memory_and_shared_cores():
    # 4 ranks on 2 cores: every CPU-bound term takes twice as long.
    c, s = Cluster(hosts=1, ranks_per_host=4, link_gbit=1, cores=2), 8 * MiB
    hand = 6 * (2 * P.alpha_shm + 2 * P.beta_shm * s / 4) + 3 * 2 * P.gamma * s / 4
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_recursive_doubling_on_two_hosts_of_two():
    # Round 1: partner on the same host (shared memory). Round 2: partner on the other host, and
    # both ranks of a host cross at once, so the link carries 2 S.
    c, s = Cluster(hosts=2, ranks_per_host=2, link_gbit=1), 64 * 1024
    hand = (P.alpha_shm + P.beta_shm * s + P.gamma * s) + \
        (P.alpha_net + link(2 * s, 1) + P.beta_tcp * s + P.gamma * s)
    assert P.seconds(exchanges.recursive_doubling(c, s)) == pytest.approx(hand)


def test_shared_cores_stretch_all_but_the_wire():
    # 8 ranks on 4 hosts sharing 2 cores: CPU work takes 4 times as long, the link does not.
    c, s = Cluster(hosts=4, ranks_per_host=2, link_gbit=1, cores=2), 16 * MiB
    hand = 14 * (4 * P.alpha_net + link(s / 8, 1) + 4 * P.beta_tcp * s / 8) + 7 * 4 * P.gamma * s / 8
    assert P.seconds(exchanges.ring(c, s)) == pytest.approx(hand)


def test_recursive_doubling_folds_three_ranks():
    c, s = Cluster(hosts=3, ranks_per_host=1, link_gbit=1), 1024
    one = P.alpha_net + link(s, 1) + P.beta_tcp * s
    hand = (one + P.gamma * s) + (2 * one + P.gamma * s)  # one round of 2, then the fold out and back
    assert P.seconds(exchanges.recursive_doubling(c, s)) == pytest.approx(hand)


def test_hierarchical_on_two_hosts_of_four():
    # Reduce-scatter of 4 slices of S/4 inside the host (3 steps), a ring of 2 hosts on each slice
    # (2 steps of S/8; 4 slices cross each link at once), an allgather inside (3 steps).
    c, s = Cluster(hosts=2, ranks_per_host=4, link_gbit=10), 64 * MiB
    inside = 3 * (P.alpha_shm + P.beta_shm * s / 4)
    across = 2 * (P.alpha_net + link(4 * s / 8, 10) + P.beta_tcp * s / 8) + P.gamma * s / 8
    hand = inside + 3 * P.gamma * s / 4 + across + inside
    assert P.seconds(exchanges.hierarchical(c, s)) == pytest.approx(hand)


def test_hora_picks_as_its_plan_does():
    two_by_two = Cluster(hosts=2, ranks_per_host=2, link_gbit=1)
    assert np.allclose(exchanges.hora_allreduce(two_by_two, 1 * MiB), exchanges.hierarchical(two_by_two, 1 * MiB))
    assert np.allclose(exchanges.hora_allreduce(two_by_two, 512 * 1024),
                       exchanges.recursive_doubling(two_by_two, 512 * 1024))
    one_host = Cluster(hosts=1, ranks_per_host=2, link_gbit=1)
    assert np.allclose(exchanges.hora_allreduce(one_host, 8192), exchanges.ring(one_host, 8192))
    assert np.allclose(exchanges.flat(two_by_two, 1 * MiB), exchanges.ring(two_by_two, 1 * MiB))


def test_shards_as_the_servers_place_them():
    # 10 > 17 / 2: split 5 + 5; then 3, 3, 1 whole to the least loaded (ties: the first).
    assert servers.plan_shards([10, 3, 3, 1], 2) == [9, 8]
    assert servers.plan_shards([7, 5], 1) == [12]
    assert servers.plan_shards([9], 4) == [3, 2, 2, 2]


def test_ps_sync_two_servers():
    # W = 4 workers on 4 hosts, K = 2 servers, one tensor of 4 MiB: shards of 2 MiB. The pushes go
    # to both servers at once: each server's link carries 4 shards in, then 4 shards out (a
    # worker's link only 4 MiB each way); the busiest server receives, sums and sends 4 shards;
    # 2 K + 2 W messages.
    c, elements = Cluster(hosts=4, ranks_per_host=1, link_gbit=1), 4 * MiB // 4
    shard = elements * 4 / 2
    hand = link(4 * shard + 4 * shard, 1) + P.beta_tcp * 4 * shard + P.gamma * 4 * shard + P.alpha_ps * (2 * 2 + 2 * 4)
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


def test_ps_async_is_the_busiest_link_one_way():
    # More servers than hosts of workers: each worker host's link (2 workers x S) binds.
    c, elements = Cluster(hosts=2, ranks_per_host=2, link_gbit=10), 1 * MiB // 4
    s = elements * 4
    busiest = max(4 * s / 8, 2 * s)
    hand = link(busiest, 10) + P.beta_tcp * 4 * s / 8 + 2 * P.gamma * 4 * s / 8 + P.alpha_ps * (2 * 8 + 2 * 4)
    assert P.seconds(servers.ps_async(c, [elements], 8)) == pytest.approx(hand)


def test_fusion_buffers():
    # 40 + 80 bytes fit in 130; the next 120 would not.
    assert predict.fusion_buffers([10, 20, 30], threshold=130) == [120, 120]
    assert predict.fusion_buffers([40], threshold=100) == [160]  # a tensor larger than the threshold alone


def synthetic_records(truth, noise=0.0, seed=0):
    """Measurements made from hand-written formulas (not the package's), with relative noise."""
    rng = np.random.default_rng(seed)
    jitter = lambda t: t * (1 + noise * rng.standard_normal())
    sizes = [4096 * 4 ** i for i in range(8)]  # 4 KiB .. 64 MiB
    wire = lambda b, g: truth.wire * b * 8 / (g * 1e9)
    # 2 ranks on 2 hosts: recursive doubling (one exchange of S) up to 512 KiB, else the ring.
    net = lambda s, g: (truth.alpha_net + wire(s, g) + truth.beta_tcp * s + truth.gamma * s if s <= 512 * 1024
                        else 2 * truth.alpha_net + wire(s, g) + truth.beta_tcp * s + truth.gamma * s / 2)
    shm = lambda s: (truth.alpha_shm + truth.beta_shm * s + truth.gamma * s if s <= 4096
                     else 2 * truth.alpha_shm + truth.beta_shm * s + truth.gamma * s / 2)
    # ps-sync, 2 workers, 1 server: 2 S in, 2 S out on its link, 2 S received and summed, 6 messages.
    ps = lambda s, g: wire(4 * s, g) + truth.beta_tcp * 2 * s + truth.gamma * 2 * s + 6 * truth.alpha_ps
    rows = lambda f: [{"bytes": s, "seconds": jitter(f(s))} for s in sizes]
    records = [{"kind": "reduce", "rows": rows(lambda s: truth.gamma * s)},
               {"kind": "allreduce", "algorithm": "auto", "hosts": 1, "ranks_per_host": 2, "rows": rows(shm)}]
    for g in (1, 10):
        records.append({"kind": "allreduce", "algorithm": "auto", "hosts": 2, "ranks_per_host": 1, "link_gbit": g,
                        "rows": rows(lambda s: net(s, g))})
        records.append({"kind": "ps-sync", "hosts": 2, "ranks_per_host": 1, "servers": 1, "link_gbit": g,
                        "rows": rows(lambda s: ps(s, g))})
    return records


def test_fit_recovers_known_parameters():
    fitted, used = fit.fit_params(synthetic_records(P))
    assert used == {"reduction": 8, "shared memory": 8, "network": 16, "parameter servers": 16}
    for name, value in P.to_json().items():
        assert getattr(fitted, name) == pytest.approx(value, rel=1e-6), name


def test_fit_under_noise_stays_close():
    fitted, _ = fit.fit_params(synthetic_records(P, noise=0.01, seed=3))
    for name in ("alpha_net", "wire", "alpha_shm", "beta_shm", "gamma", "alpha_ps"):
        assert getattr(fitted, name) == pytest.approx(getattr(P, name), rel=0.1), name


def test_fit_leaves_out_small_messages_across_hosts_when_asked():
    # Rows across hosts below 256 KiB made 10 times faster (a tbf burst): left out, the fit is exact.
    records = synthetic_records(P)
    for r in records:
        for row in r["rows"]:
            if r.get("hosts", 1) > 1 and row["bytes"] < 256 * 1024:
                row["seconds"] /= 10
    fitted, used = fit.fit_params(records, min_network_bytes=256 * 1024)
    assert used["network"] == 10 and used["shared memory"] == 8
    for name, value in P.to_json().items():
        assert getattr(fitted, name) == pytest.approx(value, rel=1e-6), name


def test_recommendation_switches_where_the_formulas_cross():
    # Only message latencies and the wire (8 Gbit/s: a byte takes 1 ns). 2 hosts x 1 rank, one
    # server: allreduce of S <= 512 KiB is one exchange, a + S ns; ps-sync moves 2 S in and 2 S
    # out of the server, 6 p + 4 S ns. ps-sync wins below S* = (a - 6 p) / 3 ns.
    a, p = 1e-3, 1e-5
    params = Params(alpha_net=a, wire=1.0, alpha_ps=p)
    crossing = (a - 6 * p) / 3e-9  # 313,333 bytes
    below = predict.predict_row(params, [int(crossing * 0.95) // 4], 2, 1, 8.0, max_servers=1)
    above = predict.predict_row(params, [int(crossing * 1.05) // 4], 2, 1, 8.0, max_servers=1)
    assert below.recommended.startswith("ps-sync, 1 server")
    assert above.recommended.startswith("allreduce")


def test_more_servers_only_while_they_pay():
    # 8 workers on 8 hosts, 64 MiB, only the wire (8 ns a byte). With K servers each server's link
    # carries 8 x 64 / K MiB each way, each worker's link 64 MiB: by hand, K = 1, 2, 4 take
    # 1024, 512, 256 MiB in all; from K = 8 on the worker's link binds, 128 MiB, and more servers
    # are no faster (the fewest of the equals wins). With a large per-message cost (2 K + 2 W
    # messages), one server is best.
    cluster = Cluster(8, 1, 1.0)
    hand = {k: 2 * max(8 * 64 / k, 64) * MiB * 8e-9 for k in (1, 2, 4, 8, 16, 32)}
    assert hand[1] == pytest.approx(1024 * MiB * 8e-9) and hand[8] == hand[32] == pytest.approx(128 * MiB * 8e-9)
    for k, seconds in hand.items():
        assert Params(wire=1.0).seconds(servers.ps_sync(cluster, [64 * MiB // 4], k)) == pytest.approx(seconds), k
    cheap = predict.best_servers(Params(wire=1.0), cluster, [64 * MiB // 4], "ps-sync", 32)
    costly = predict.best_servers(Params(wire=1.0, alpha_ps=1.0), cluster, [MiB], "ps-sync", 32)
    assert cheap == (pytest.approx(hand[8]), 8) and costly[1] == 1


def run_cli(*args):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(root, "python")] + sys.path)
    return subprocess.run([sys.executable, "-m", "hora.cost_model", *args], env=env, capture_output=True,
                          text=True, check=True).stdout


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
