"""Fitting the parameters (params.py) to measured exchanges, by least squares.

A measurement record (what benchmarks/cost_model/ writes, from hora-bench's --json and the
parameter-server exchange benchmark) names the exchange and the cluster it ran on:

  {"kind": "allreduce" | "ps-sync" | "ps-async" | "reduce",
   "algorithm": "ring" | "hierarchical" | "recursive-doubling" | "auto",   (allreduce)
   "hosts": H, "ranks_per_host": L, "link_gbit": R, "cores": C or null, "servers": K,
   "cache_bytes": the last-level cache (default 32 MiB),
   "rows": [{"bytes": S, "seconds": t}, ...]}

Every row's phases come from the same formulas that predict (exchanges.py, servers.py), so the
fit finds the parameters under which the formulas explain the measurements. The terms are fitted
in stages, each on the records that isolate them, the earlier ones held fixed: the reduction
speed (in and out of the cache) from the reduce kernel's timings, shared memory from one-host
allreduces, the network from allreduces across hosts (capped links show the wire, an uncapped
one TCP's CPU cost), the parameter servers' per-message cost and the wait for a core from their
exchanges and any other record whose processes outnumber the cores they share. Each row is
weighted by 1 / its time, so the fit minimises relative errors (small messages count as much as
large ones), and every term stays non-negative.

A phase lasts as long as its busiest lane, so a row's time is linear in the parameters once it is
known which lanes bind: the fit starts from typical values, solves the linear problem (non-negative
least squares) for the lanes that bind there, and repeats until those lanes stop changing; a
general least-squares solver then polishes the result.
"""

import numpy as np
from scipy.optimize import least_squares, nnls

from hora.cost_model import exchanges, servers
from hora.cost_model.cluster import DEFAULT_CACHE_BYTES, Cluster
from hora.cost_model.params import TERMS, Params, costs, phase


def oversubscribed(record):
    """Whether the record's processes (its ranks, and its servers) outnumber the cores they share."""
    if record["kind"] == "reduce" or not record.get("cores"):
        return False
    processes = record.get("hosts", 1) * record.get("ranks_per_host", 1) + record.get("servers", 0)
    return processes > record["cores"]


# (what the stage fits, the records it uses, the terms it frees)
STAGES = (
    ("reduction", lambda r: r["kind"] == "reduce", ("gamma", "mem")),
    ("shared memory", lambda r: r["kind"] == "allreduce" and r["hosts"] == 1, ("alpha_shm", "beta_shm")),
    ("network", lambda r: r["kind"] == "allreduce" and r["hosts"] > 1, ("alpha_net", "wire", "beta_tcp")),
    # Together: the parameter-server records are those whose processes outnumber the cores here.
    ("servers and waits", lambda r: r["kind"] in servers.PS_MODES or oversubscribed(r), ("alpha_ps", "sched")),
)


# Where the fit starts: this machine's orders of magnitude (they only pick the first lanes).
TYPICAL = Params(alpha_net=3e-5, wire=1.0, beta_tcp=5e-10, alpha_shm=2e-6, beta_shm=5e-11, gamma=2e-11, mem=1e-10,
                 alpha_ps=3e-5, sched=1e-5)


def cluster_of(record):
    return Cluster(hosts=record.get("hosts", 1), ranks_per_host=record.get("ranks_per_host", 1),
                   link_gbit=record.get("link_gbit") or 1e6, cores=record.get("cores"),
                   cache_bytes=record.get("cache_bytes") or DEFAULT_CACHE_BYTES)


def row_phases(record, size):
    """The phases of one measured row: the exchange the record names, of `size` bytes."""
    kind = record["kind"]
    if kind == "reduce":  # a += b: both operands are the working set
        hit = cluster_of(record).cached(2 * size)
        return phase(cores=(costs(gamma=hit * size, mem=(1 - hit) * size),))
    if kind == "allreduce":
        return exchanges.ALLREDUCE_ALGORITHMS[record.get("algorithm", "auto")](cluster_of(record), size)
    if kind in servers.PS_MODES:
        return servers.PS_MODES[kind](cluster_of(record), [size // servers.FLOAT_BYTES], record["servers"])
    raise ValueError(f"unknown record kind {kind!r}")


def fit_terms(rows, measured, free, fixed, start=TYPICAL):
    """The free terms' values that best explain `measured` (seconds) given the fixed ones:
    relative least squares on the rows' phases, every term >= 0."""
    measured = np.asarray(measured, dtype=float)
    index = [TERMS.index(t) for t in free]
    weights = 1.0 / measured

    def params(values):
        vector = fixed.vector()
        vector[index] = values
        return Params(**dict(zip(TERMS, vector)))

    def residuals(values):
        p = params(values)
        return np.array([p.seconds(r) for r in rows]) * weights - 1.0

    values = start.vector()[index]
    for _ in range(50):  # the binding lanes at these values, solved as a linear problem
        p = params(values)
        binding = np.array([p.binding(r) for r in rows])
        held = p.vector()
        held[index] = 0.0
        solution, _ = nnls(binding[:, index] * weights[:, None], (measured - binding @ held) * weights)
        if np.allclose(solution, values, rtol=1e-9, atol=0.0):
            break
        values = solution
    scale = np.maximum(np.abs(values), start.vector()[index])
    polished = least_squares(residuals, values, bounds=(0.0, np.inf), x_scale=scale)
    if np.sum(polished.fun ** 2) < np.sum(residuals(values) ** 2):
        values = polished.x
    return dict(zip(free, values))


def fit_params(records, start=TYPICAL, min_network_bytes=0):
    """Params fitted to the records, stage by stage; a stage without records keeps `start`'s values.
    Rows across capped links smaller than `min_network_bytes` are left out of the fit (a tbf-capped
    link lets a burst through at the veth's speed, so its small messages do not show the link;
    uncapped links, without a link_gbit, show their messages' latency and keep every row).
    Returns (params, {stage: number of rows used})."""
    params, used = start, {}
    for stage, selects, free in STAGES:
        chosen = [r for r in records if selects(r)]
        rows = [(row_phases(r, row["bytes"]), row["seconds"]) for r in chosen for row in r["rows"]
                if r.get("hosts", 1) == 1 or not r.get("link_gbit") or row["bytes"] >= min_network_bytes]
        used[stage] = len(rows)
        if rows:
            values = fit_terms([c for c, _ in rows], [t for _, t in rows], free, params, start)
            params = Params(**{**params.to_json(), **values})
    return params, used


def predicted_seconds(params, record, size):
    return params.seconds(row_phases(record, size))
