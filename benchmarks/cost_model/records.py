#!/usr/bin/env python3
"""Measurement records for hora.cost_model (python/hora/cost_model/fit.py describes the format),
from what the benchmarks wrote; the raw output goes into the record too.

  records.py allreduce RAW.json --hosts H --ranks-per-host L --link-gbit G --algorithm A ... --out REC
  records.py ps PREFIX... --mode ps-sync --hosts W --servers K --link-gbit G ... --out REC
  records.py reduce RAW.json --out REC          (reduce-benchmark --benchmark_format=json)

--role says what the record is for: "calibration" (the fit) or "validation" (compared only).
"""

import argparse
import glob
import json
import os


def allreduce_rows(raw):
    """hora-bench --json: the in-place time of each size (an average over the timed iterations)."""
    return [{"bytes": row["size"], "seconds": row["in_place"]["time_us"] * 1e-6} for row in raw["rows"]]


def ps_rows(prefixes):
    """ps_exchange.py's files, one prefix per size: ps-sync, the slowest worker's mean (a round
    ends for everyone together); ps-async, where each goes its own pace (and the links need not
    share fairly), the exchanges per second of all workers together as one worker's time: the
    harmonic mean of their means."""
    rows, raw = [], []
    for prefix in prefixes:
        workers = [json.load(open(path)) for path in sorted(glob.glob(f"{prefix}.rank*.json"))]
        if not workers:
            raise SystemExit(f"no {prefix}.rank*.json")
        times = [w["seconds"] for w in workers]
        seconds = max(times) if workers[0]["mode"] == "ps-sync" else len(times) / sum(1 / t for t in times)
        rows.append({"bytes": workers[0]["bytes"], "seconds": seconds})
        raw.append(workers)
    return rows, raw


def reduce_rows(raw):
    """reduce-benchmark's float32 sums: a += b of `size` bytes per call."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    return [{"bytes": int(b["name"].rsplit("/", 1)[1]), "seconds": b["real_time"] * scale[b["time_unit"]]}
            for b in raw["benchmarks"] if b["name"].startswith("Reduce/Float32Sum/") and b["run_type"] == "iteration"]


def last_level_cache():
    """Bytes of this machine's largest CPU cache (sysfs), None where it cannot be read."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        text = open(path).read().strip()
        units = {"K": 1024, "M": 2**20, "G": 2**30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes) if sizes else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["allreduce", "ps", "reduce"])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--role", default="validation", choices=["calibration", "validation"])
    ap.add_argument("--mode", default="ps-sync", choices=["ps-sync", "ps-async"])
    ap.add_argument("--algorithm", default="auto")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--ranks-per-host", type=int, default=1)
    ap.add_argument("--servers", type=int, default=0)
    ap.add_argument("--link-gbit", type=float, default=None)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--run", type=int, default=0, help="which repetition")
    args = ap.parse_args()
    record = {"role": args.role, "run": args.run, "hosts": args.hosts, "ranks_per_host": args.ranks_per_host,
              "link_gbit": args.link_gbit, "cores": args.cores, "cache_bytes": last_level_cache(),
              "loadavg": os.getloadavg()[0]}
    if args.kind == "ps":
        rows, raw = ps_rows(args.inputs)
        record.update(kind=args.mode, servers=args.servers, rows=rows, raw=raw)
    else:
        raw = json.load(open(args.inputs[0]))
        rows = allreduce_rows(raw) if args.kind == "allreduce" else reduce_rows(raw)
        record.update(kind=args.kind, algorithm=args.algorithm, rows=rows, raw=raw)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
