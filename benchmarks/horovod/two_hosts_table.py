#!/usr/bin/env python3
"""The table of two_hosts.sh's runs (JSON lines: framework, rate, run, load, result): per link
rate, hora's and Horovod's medians with every run in order, and hora / Horovod as the median of
the per-round ratios (for latency and step time, Horovod / hora: above 1 means hora is faster).

usage: two_hosts_table.py RUNS.jsonl
"""

import collections
import json
import statistics
import sys

# (label, how to read it from a result, higher is better)
FIGURES = [
    ("4-byte allreduce latency (us)", lambda r: r["latency_4B_us"], False),
    ("allreduce busbw 1 MiB (GB/s)", lambda r: r["busbw_GBps"]["1MiB"], True),
    ("allreduce busbw 16 MiB (GB/s)", lambda r: r["busbw_GBps"]["16MiB"], True),
    ("allreduce busbw 64 MiB (GB/s)", lambda r: r["busbw_GBps"]["64MiB"], True),
    ("CNN training (images/s)", lambda r: r["images_per_sec"], True),
]


def runs_of(lines):
    """(rate, figure label, framework) -> [value per round, in round order]"""
    runs = collections.defaultdict(list)
    for entry in sorted(lines, key=lambda e: e["run"]):
        for label, read, _ in FIGURES:
            try:
                runs[(entry["rate"], label, entry["framework"])].append(read(entry["result"]))
            except KeyError:
                pass  # another workload's result
    return runs


def cell(values):
    return f"{statistics.median(values):.4g} ({' / '.join(f'{v:.4g}' for v in values)})"


def main():
    with open(sys.argv[1]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    runs = runs_of(lines)
    print("| link | figure | hora | Horovod | hora's advantage (pairs) |")
    print("|---|---|---|---|---|")
    for rate in dict.fromkeys(e["rate"] for e in lines):
        for label, _, higher_better in FIGURES:
            hora, horovod = runs.get((rate, label, "hora")), runs.get((rate, label, "Horovod"))
            if not hora or not horovod:
                continue
            pairs = [a / b if higher_better else b / a for a, b in zip(hora, horovod)]
            print(f"| {rate} | {label} | {cell(hora)} | {cell(horovod)} | "
                  f"{statistics.median(pairs):.2f}x ({' / '.join(f'{p:.2f}' for p in pairs)}) |")
    loads = [e["load"] for e in lines]
    print(f"\n{len(lines)} runs; load average (1 min) at their ends: {min(loads)}-{max(loads)}")


if __name__ == "__main__":
    sys.exit(main())
