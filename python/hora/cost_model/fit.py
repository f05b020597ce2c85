"""Fitting the parameters (params.py) to measured exchanges, by least squares.

A measurement record (what benchmarks/cost_model/ writes, from hora-bench's --json and the
parameter-server exchange benchmark) names the exchange and the cluster it ran on:

  {"kind": "allreduce" | "ps-sync" | "ps-async" | "reduce",
   "algorithm": "ring" | "hierarchical" | "recursive-doubling" | "auto",   (allreduce)
   "hosts": H, "ranks_per_host": L, "link_gbit": R, "cores": C or null, "servers": K,
   "rows": [{"bytes": S, "seconds": t}, ...]}

Every row's cost vector comes from the same formulas that predict (exchanges.py, servers.py),
so the fit finds the parameters under which the formulas explain the measurements. The terms
are fitted in stages, each on the records that isolate them, the earlier ones held fixed:
the reduction speed from the reduce kernel's timings, shared memory from one-host allreduces,
the network from allreduces across hosts (at two or more link rates, to tell the wire from the
CPU's per-byte cost), the parameter servers' per-message cost from their exchanges. Each row
is weighted by 1 / its time, so the fit minimises relative errors (small messages count as
much as large ones) and non-negative least squares keeps every term physical.
"""

import numpy as np
from scipy.optimize import nnls

from hora.cost_model import exchanges, servers
from hora.cost_model.cluster import Cluster
from hora.cost_model.params import TERMS, Params, costs

# (what the stage fits, the records it uses, the terms it frees)
STAGES = (
    ("reduction", lambda r: r["kind"] == "reduce", ("gamma",)),
    ("shared memory", lambda r: r["kind"] == "allreduce" and r["hosts"] == 1, ("alpha_shm", "beta_shm")),
    ("network", lambda r: r["kind"] == "allreduce" and r["hosts"] > 1, ("alpha_net", "wire", "beta_tcp")),
    ("parameter servers", lambda r: r["kind"] in servers.PS_MODES, ("alpha_ps",)),
)


def cluster_of(record):
    return Cluster(hosts=record.get("hosts", 1), ranks_per_host=record.get("ranks_per_host", 1),
                   link_gbit=record.get("link_gbit") or 1e6, cores=record.get("cores"))


def row_costs(record, size):
    """The cost vector of one measured row: the exchange the record names, of `size` bytes."""
    kind = record["kind"]
    if kind == "reduce":
        return costs(gamma=size)
    if kind == "allreduce":
        return exchanges.ALLREDUCE_ALGORITHMS[record.get("algorithm", "auto")](cluster_of(record), size)
    if kind in servers.PS_MODES:
        return servers.PS_MODES[kind](cluster_of(record), [size // servers.FLOAT_BYTES], record["servers"])
    raise ValueError(f"unknown record kind {kind!r}")


def fit_terms(rows, measured, free, fixed):
    """The free terms' values that best explain `measured` (seconds) given the fixed ones:
    weighted non-negative least squares on the rows' cost vectors."""
    rows, measured = np.asarray(rows), np.asarray(measured)
    free_index = [TERMS.index(t) for t in free]
    held = fixed.vector()
    held[free_index] = 0.0  # the free terms' current values are what is being replaced
    remainder = measured - rows @ held
    weights = 1.0 / measured
    solution, _ = nnls(rows[:, free_index] * weights[:, None], remainder * weights)
    return dict(zip(free, solution))


def fit_params(records, start=Params(), min_network_bytes=0):
    """Params fitted to the records, stage by stage; a stage without records keeps `start`'s values.
    Rows across hosts smaller than `min_network_bytes` are left out of the fit (a tbf-capped link
    lets a burst through at the veth's speed, so its small messages do not show the link).
    Returns (params, {stage: number of rows used})."""
    params, used = start, {}
    for stage, selects, free in STAGES:
        chosen = [r for r in records if selects(r)]
        rows = [(row_costs(r, row["bytes"]), row["seconds"]) for r in chosen for row in r["rows"]
                if r.get("hosts", 1) == 1 or row["bytes"] >= min_network_bytes]
        used[stage] = len(rows)
        if rows:
            values = fit_terms([c for c, _ in rows], [t for _, t in rows], free, params)
            params = Params(**{**params.to_json(), **values})
    return params, used


def predicted_seconds(params, record, size):
    return params.seconds(row_costs(record, size))
