#!/usr/bin/env python3
"""Plots and tabulates benchmarks/adasum/convergence.py's results.

    python benchmarks/adasum/plot.py OUT.png RESULTS.json [MORE.json ...]

Writes a plot of validation accuracy per epoch (one line per op and learning rate) and prints
the markdown table of the README (a diverged run shows "diverged" from the epoch its loss
stopped being finite)."""

import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    runs, meta = [], None
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        meta = meta or {k: v for k, v in result.items() if k != "runs"}
        runs += result["runs"]
    return meta, sorted(runs, key=lambda r: (r["lr"], r["op"]))


def table(meta, runs):
    epochs = max(len(r["epochs"]) for r in runs)
    head = "| op | lr | " + " | ".join(f"epoch {e + 1}" for e in range(epochs)) + " |"
    lines = [head, "|" + " --- |" * (epochs + 2)]
    for r in runs:
        cells = []
        for e in range(epochs):
            if e < len(r["epochs"]) and math.isfinite(r["epochs"][e]["train_loss"]):
                cells.append(f"{r['epochs'][e]['val_accuracy']:.4f}")
            else:
                cells.append("diverged")
        lines.append(f"| {r['op']} | {r['lr']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(meta, runs, out):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {}
    for r in runs:
        color = colors.setdefault(r["lr"], f"C{len(colors)}")
        accuracy = [e["val_accuracy"] if math.isfinite(e["train_loss"]) else float("nan") for e in r["epochs"]]
        failed = all(not a > 0.2 for a in accuracy)  # NaN loss, or stuck at chance (0.1)
        ax.plot(range(1, len(accuracy) + 1), accuracy, color=color, marker="o" if r["op"] == "adasum" else "s",
                linestyle="-" if r["op"] == "adasum" else "--",
                label=f"{r['op']}, lr {r['lr']:g}" + (" (diverged)" if failed else ""))
    ax.set_xticks(range(1, max(len(r["epochs"]) for r in runs) + 1))
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0.6, 0.92)
    ax.set_title(f"Fashion-MNIST CNN, {meta['workers']} ranks, global batch {meta['global_batch']} "
                 f"({meta['train_images']} images/epoch)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    meta, runs = load(paths)
    plot(meta, runs, out)
    print(table(meta, runs))


if __name__ == "__main__":
    main()
