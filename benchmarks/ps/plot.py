#!/usr/bin/env python3
"""The README's plot of parameter servers against allreduce, from ps_tbf.py's files.

    python benchmarks/ps/plot.py OUT.png --steps STEP_TIME.json... --accuracy TIME_TO_ACC.json...

Left: each mode's images/s over allreduce's (median of the per-round ratios) for every link,
number of workers and servers in the step-time files (no straggler). Then a panel per
time-to-accuracy file: test accuracy against time for each mode, the median run of each (no
straggler)."""

import argparse
import collections
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"allreduce": "black", "ps-sync": "tab:blue", "ps-async": "tab:red", "staleness 2": "tab:orange",
          "staleness 8": "tab:green", "ps-async m0.5": "tab:purple"}


def samples(paths):
    return [s for path in paths for s in json.load(open(path))["samples"] if s["straggler"] == 0]


def ratios(runs):
    """{(rate, workers, label, servers): median over rounds of images/s over allreduce's}"""
    by_round = {(s["rate"], s["workers"], s["round"]): s["images_per_sec"] for s in runs if s["label"] == "allreduce"}
    groups = collections.defaultdict(list)
    for s in runs:
        if s["label"] != "allreduce":
            base = by_round[s["rate"], s["workers"], s["round"]]
            groups[s["rate"], s["workers"], s["label"], s["servers"]].append(s["images_per_sec"] / base)
    return {k: statistics.median(v) for k, v in groups.items()}


def plot_step_ratios(ax, runs):
    table = ratios(runs)
    settings = sorted({(rate, workers) for rate, workers, _, _ in table}, key=lambda k: (k[1], int(k[0][:-4])))
    labels = [label for label in COLORS if any(k[2] == label for k in table)]
    servers = sorted({k[3] for k in table})
    x, ticks = 0.0, []
    for rate, workers in settings:
        for n in servers:
            bars = [(label, table.get((rate, workers, label, n))) for label in labels]
            bars = [(label, v) for label, v in bars if v is not None]
            if not bars:
                continue
            for i, (label, v) in enumerate(bars):
                ax.bar(x + i * 0.8 / len(labels), v, 0.8 / len(labels), color=COLORS[label],
                       label=label if not ticks else None)
            ticks.append((x + 0.4 - 0.4 / len(labels), f"{workers}w {n}s\n{rate.replace('gbit', 'G')}"))
            x += 1
        x += 0.5
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([t for t, _ in ticks], [name for _, name in ticks], fontsize=7)
    ax.set_ylabel("images/s over allreduce's")
    ax.set_title("step throughput (w workers, s servers, link)")
    ax.legend(fontsize=7)


def plot_accuracy(ax, runs):
    groups = collections.defaultdict(list)
    for s in runs:
        groups[s["workers"], s["servers"], s["label"]].append(s)
    reached_by = []  # seconds of the median runs that reached the target
    for (workers, n, label), group in sorted(groups.items(), key=lambda kv: list(COLORS).index(kv[0][2])):
        median = sorted(group, key=lambda s: s["seconds"])[len(group) // 2]
        seconds = [0.0] + [h[2] for h in median["history"]]
        accuracy = [0.1] + [h[1] for h in median["history"]]
        outcome = f"{median['seconds']:.0f} s" if median["reached"] else \
            f"not reached: {median['accuracy']:.2f} at {median['seconds']:.0f} s"
        if median["reached"]:
            reached_by.append(median["seconds"])
        ax.plot(seconds, accuracy, color=COLORS[label], marker=".",
                label=f"{label}{f', {n} server' + ('s' if n > 1 else '') if n else ''} ({outcome})")
        target = median["target"]
    ax.axhline(target, color="grey", linestyle=":", linewidth=0.8)
    if len(reached_by) < len(groups):  # a run that never got there: show the others' span, from 0
        ax.set_xlim(0, 1.5 * max(reached_by, default=600))
        ax.set_ylim(0.0, 0.9)
    else:
        ax.set_ylim(0.5, 0.9)
    rates = sorted({s["rate"] for s in runs})
    workers = sorted({s["workers"] for s in runs})
    rates = [r.replace("gbit", " Gbit/s") for r in rates]
    ax.set_title(f"time to {target:.0%}: {', '.join(map(str, workers))} workers, {', '.join(rates)} (median run)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("test accuracy")
    ax.legend(fontsize=7, loc="lower right")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--steps", nargs="+", required=True)
    ap.add_argument("--accuracy", nargs="+", required=True)
    args = ap.parse_args()
    fig, axes = plt.subplots(1, 1 + len(args.accuracy), figsize=(6 * (1 + len(args.accuracy)), 4.2))
    plot_step_ratios(axes[0], samples(args.steps))
    for ax, path in zip(axes[1:], args.accuracy):  # a panel per file
        plot_accuracy(ax, samples([path]))
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
