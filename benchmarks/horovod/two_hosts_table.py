#!/usr/bin/env python3
"""The tables of two_hosts.sh's runs (JSON lines: framework, rate, run, load, result): per link
rate, hora's and Horovod's medians with every run in order, and hora / Horovod as the median of
the per-round ratios (for latency, Horovod / hora: above 1 means hora is faster); then each cut
link: how long the job's processes outlived it and the job's last lines.

usage: two_hosts_table.py table RUNS.jsonl CUTS.jsonl
       two_hosts_table.py cut FRAMEWORK RUN SECONDS LOG     (prints one line for CUTS.jsonl)
"""

import collections
import json
import statistics
import sys


def images_per_sec(workload):
    """Reads a training workload's images/s; KeyError for another workload's result."""
    return lambda r: r["images_per_sec"] if r["workload"] == workload else {}["not " + workload]


def seconds_to_target(r):
    """workloads.py tta's seconds; KeyError for another workload's result or a run that gave up."""
    return r["seconds"] if r["workload"] == "tta" and r["reached"] else {}["not a tta that reached its target"]


# (label, how to read it from a result, higher is better)
FIGURES = [
    ("4-byte allreduce latency (us)", lambda r: r["latency_4B_us"], False),
    ("allreduce busbw 1 MiB (GB/s)", lambda r: r["busbw_GBps"]["1MiB"], True),
    ("allreduce busbw 16 MiB (GB/s)", lambda r: r["busbw_GBps"]["16MiB"], True),
    ("allreduce busbw 64 MiB (GB/s)", lambda r: r["busbw_GBps"]["64MiB"], True),
    ("CNN training (images/s)", images_per_sec("cnn"), True),
    ("WRN-16-10 training, global batch 32 (images/s)", images_per_sec("wrn"), True),
    ("Keras model.fit, the CNN (images/s)", images_per_sec("keras-cnn"), True),
    ("Keras model.fit, WRN-16-10 (images/s)", images_per_sec("keras-wrn"), True),
    ("CNN to 85% test accuracy (s)", seconds_to_target, False),
    ("pytorch_synthetic_benchmark.py resnet18, batch 32 (images/s)", lambda r: r["synthetic_images_per_sec"], True),
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


def cut_line(framework, run, seconds, log):
    """A cut link's record: the job's last lines that are neither steps nor TensorFlow's chatter."""
    with open(log, errors="replace") as f:
        said = [line for line in f.read().splitlines() if not any(s in line for s in ("STEP", "oneDNN", "cpu_feature"))]
    return json.dumps({"framework": framework, "run": int(run), "seconds": seconds, "last_lines": said[-8:]})


def print_cuts(path):
    with open(path) as f:
        for cut in (json.loads(line) for line in f if line.strip()):
            print(f"\na cut link, {cut['framework']}, round {cut['run']}: {cut['seconds']} s until no process was left")
            print("\n".join("    " + line for line in cut["last_lines"]))


def print_table(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines:  # --cuts-only
        return
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


def main():
    if sys.argv[1] == "cut":
        print(cut_line(*sys.argv[2:6]))
    else:
        print_table(sys.argv[2])
        print_cuts(sys.argv[3])


if __name__ == "__main__":
    sys.exit(main())
