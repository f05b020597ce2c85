#!/usr/bin/env python3
"""Renders hora timeline files (Chrome trace-event JSON) to a PNG: one row per tensor, bars
colored by phase, one panel per file (rank). For documentation; open the JSON itself in
chrome://tracing or Perfetto to explore.

    render_timeline.py OUT.png TRACE.json [TRACE.json ...] [--last-ms 150] [--max-rows 40]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"NEGOTIATE": "#f2c14e", "QUEUE": "#c9c9c9", "MEMCPY_IN_FUSION_BUFFER": "#5fad56",
          "MEMCPY_OUT_FUSION_BUFFER": "#4d9078", "COLLECTIVE": "#3a6ea5"}


def load(path):
    text = open(path).read().rstrip()
    if not text.endswith("]"):
        text += "]"  # a file cut short, as viewers read it
    return json.loads(text)


def spans(events):
    lanes, names, stack, marks, rank = {}, {}, {}, [], 0
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "process_name":
            rank = e["pid"]
        elif e.get("ph") == "B":
            stack.setdefault(e["tid"], []).append((e["name"], e["ts"]))
        elif e.get("ph") == "E" and stack.get(e["tid"]):
            name, start = stack[e["tid"]].pop()
            lanes.setdefault(e["tid"], []).append((name, start, e["ts"]))
        elif e.get("ph") == "i":
            marks.append((e["tid"], e["ts"], e["name"]))
    return lanes, names, marks, rank


def phase(name):
    if name.startswith("NEGOTIATE"):
        return "NEGOTIATE"
    return name if name in COLORS else "COLLECTIVE"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("traces", nargs="+")
    p.add_argument("--last-ms", type=float, default=150)
    p.add_argument("--max-rows", type=int, default=40)
    a = p.parse_args()
    fig, axes = plt.subplots(len(a.traces), 1, figsize=(12, 4 * len(a.traces)), squeeze=False)
    for ax, path in zip(axes[:, 0], a.traces):
        lanes, names, marks, rank = spans(load(path))
        end = max(s[2] for spans_ in lanes.values() for s in spans_)
        start = end - a.last_ms * 1000
        rows = [t for t in sorted(lanes) if names.get(t) != "(cycles)"][-a.max_rows:]
        for y, tid in enumerate(rows):
            for name, s, e in lanes[tid]:
                if e < start:
                    continue
                ax.broken_barh([((s - start) / 1000, max((e - s) / 1000, 0.02))], (y - 0.4, 0.8),
                               color=COLORS[phase(name)])
        cycles = [(ts - start) / 1000 for tid, ts, n in marks if n == "CYCLE_START" and ts >= start]
        ax.vlines(cycles, -1, len(rows), colors="#eeeeee", linewidth=0.5, zorder=0)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([names.get(t, str(t)) for t in rows], fontsize=6)
        ax.set_xlabel("ms (last %g ms of the trace)" % a.last_ms)
        ax.set_title(f"hora timeline, rank {rank}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.legend(handles, list(COLORS), loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
