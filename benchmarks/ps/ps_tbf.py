#!/usr/bin/env python3
"""Parameter servers against allreduce across namespace hosts with tbf-capped links (ps_tbf.sh
sets the hosts up): training step time of one model for allreduce, ps-sync, ps-async and
ps-async with max_staleness 2 and 8, for each number of workers and servers asked, with and
without a straggler. Every configuration once per round, rounds repeated (interleaved).

  ps_tbf.py run --ns NS... --ips IP... --ssh-key KEY --rate 1gbit --out FILE
                [--workers 2 4] [--servers 1 2] [--stragglers 0 0.5] [--model cnn] [--repeat 3]
                [--modes allreduce ps-sync ps-async 'staleness 2' 'staleness 8' ['ps-async m0.5']
                         ['ps-sync whole' 'ps-async whole'] ['allreduce fp16' 'ps-sync fp16' 'ps-async fp16']
                         ['ps-async compensated'] ['allreduce adam' 'allreduce adam sqrt-lr' 'ps-async adam'
                         'ps-async adam compensated']]
                [--target 0.85 [--eval-every 50] [--give-up 600]]
  ps_tbf.py table FILE... [--json ALL]
  ps_tbf.py wins FILE... [--pace]   (time-to-accuracy files: each mode against allreduce, per set)

Placement: worker r on host r (one rank per host), server k on host W + k (a host of its own,
--server-hosts), all started by horarun from the first host over ssh. The workers are
benchmarks/training/train_bench.py's (random data). A straggler fraction f makes the last worker
idle f times its own compute time each step.

Figures per run: the job's images/s (each worker's images over its own timed steps, summed:
in ps-async the workers do not wait for each other) and rank 0's step time (a worker that is
not the straggler). With --target, the time to that test accuracy instead: the CNN on the real
Fashion-MNIST (train_bench.py's time-to-accuracy workers: the same seed and data order in every
mode, the test set evaluated every --eval-every steps, which also brings ps-async's workers
together), the learning rate scaled by the workers except in ps-async (each push is an update).
"""

import argparse
import collections
import json
import os
import signal
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks", "training"))
import train_bench as tb  # noqa: E402  (the workers and the hang guard)

# (label, mode, max_staleness, the SGD's momentum). "ps-async m0.5": asynchrony adds momentum of its
# own (stale gradients keep pushing the way the parameters went), and at 8 workers the servers'
# momentum 0.9 made the CNN collapse (docs/parameter_servers.md).
MODES = [("allreduce", "allreduce", -1, 0.9), ("ps-sync", "ps-sync", -1, 0.9), ("ps-async", "ps-async", -1, 0.9),
         ("staleness 2", "ps-async", 2, 0.9), ("staleness 8", "ps-async", 8, 0.9),
         ("ps-async m0.5", "ps-async", -1, 0.5), ("ps-sync whole", "ps-sync", -1, 0.9),
         ("ps-async whole", "ps-async", -1, 0.9), ("allreduce fp16", "allreduce", -1, 0.9),
         ("ps-sync fp16", "ps-sync", -1, 0.9), ("ps-async fp16", "ps-async", -1, 0.9),
         ("ps-async compensated", "ps-async", -1, 0.9), ("allreduce adam", "allreduce", -1, 0.9),
         ("ps-async adam", "ps-async", -1, 0.9), ("ps-async adam compensated", "ps-async", -1, 0.9),
         ("allreduce adam sqrt-lr", "allreduce", -1, 0.9)]
# "... fp16": Compression.fp16 (float16 on the wire).
# "... compensated": HORA_PS_COMPENSATE_MOMENTUM=1, the servers' momentum lowered by 1 - 1/workers.
# "... adam": Adam (lr 0.001, scaled as SGD's 0.01 is; its beta1 is the mode's momentum) instead of SGD;
# "... adam sqrt-lr": its lr scaled by the square root of the workers instead.
COMPENSATED = ["-x", "HORA_PS_COMPENSATE_MOMENTUM=1"]
# "... whole": the push of a step goes out only once its whole shard is ready (parts of 1024G), not
# in parts while the backward pass goes on: what the overlap gains.
WHOLE_PUSH = ["-x", "HORA_BUCKET_BYTES=1024G"]
DEFAULT_MODES = [m[0] for m in MODES[:5]]


def configurations(args):
    for model in args.models:
        for workers in args.workers:
            for straggler in args.stragglers:
                for label, mode, staleness, momentum in (m for m in MODES if m[0] in args.modes):
                    for servers in ([0] if mode == "allreduce" else args.servers):
                        yield dict(model=model, workers=workers, servers=servers, straggler=straggler, label=label,
                                   mode=mode, max_staleness=staleness, momentum=momentum)


def optimizer_of(label):
    """train_bench.py's --optimizer for a mode's label."""
    if " adam" not in label:
        return "sgd"
    return "adam-sqrt-lr" if label.endswith(" sqrt-lr") else "adam"


def run_one(args, c, steps, warmup):
    horarun = os.path.join(os.path.dirname(sys.executable), "horarun")
    w, s = c["workers"], c["servers"]
    hosts = ",".join(f"{ip}:1" for ip in args.ips[:w])
    cmd = ["ip", "netns", "exec", args.ns[0], horarun, "-i", args.ssh_key, "-np", str(w), "-H", hosts,
           "--start-timeout", "300", "-x", "HORA_LOG_LEVEL=error"]
    if s:
        cmd += ["--server-hosts", ",".join(f"{ip}:1" for ip in args.ips[w:w + s])]
    if c["label"].endswith(" whole"):
        cmd += WHOLE_PUSH
    if c["label"].endswith(" compensated"):
        cmd += COMPENSATED
    cmd += tb.worker_argv("hora", c["model"], args.width, steps, warmup, mode=c["mode"],
                          max_staleness=c["max_staleness"], straggler=c["straggler"], momentum=c["momentum"],
                          fp16=c["label"].endswith(" fp16"), optimizer=optimizer_of(c["label"]),
                          target=args.target, eval_every=args.eval_every, give_up=args.give_up,
                          pin_core=args.pin_cores)
    ranks = tb.run_job([(cmd, dict(os.environ))], w, args.timeout)
    for r in ranks:
        if r.get("local_size") != 1 or r.get("cross_size") != w:
            raise RuntimeError(f"rank {r['rank']}: local_size {r.get('local_size')}, cross_size {r.get('cross_size')}"
                               f": the workers must be on {w} hosts")
        if args.pin_cores and len(r["cpus"]) != 1:
            raise RuntimeError(f"rank {r['rank']}: on cores {r['cpus']}, where --pin-cores gives it one")
    if args.target:  # rank 0's clock; every worker evaluated the same weights at the same steps
        r0 = ranks[0]
        return dict(seconds=r0["seconds"], trained_steps=r0["steps"], accuracy=r0["accuracy"],
                    reached=r0["accuracy"] >= args.target, history=r0["history"])
    return dict(images_per_sec=sum(r["batch"] * r["steps"] / r["own_seconds"] for r in ranks),
                step_ms=ranks[0]["own_seconds"] / ranks[0]["steps"] * 1000,
                slowest_step_ms=max(r["own_seconds"] / r["steps"] for r in ranks) * 1000)


def run(args):
    needed = max(args.workers) + max(args.servers)
    if len(args.ns) < needed:
        raise SystemExit(f"{needed} hosts needed, {len(args.ns)} given")
    samples = []
    for rep in range(args.repeat):
        for c in configurations(args):
            steps, warmup = args.steps or tb.DEFAULT_STEPS[c["model"]][0], args.warmup or tb.DEFAULT_STEPS[c["model"]][1]
            print(f"{args.rate} round {rep + 1}/{args.repeat}: {c}", file=sys.stderr, flush=True)
            samples.append(dict(c, rate=args.rate, round=rep, steps=steps, warmup=warmup, target=args.target,
                                pinned=args.pin_cores,
                                loadavg=os.getloadavg()[0], **run_one(args, c, steps, warmup)))
            with open(args.out, "w") as f:  # after every run: a failure later keeps what was measured
                json.dump({"args": vars(args), "samples": samples}, f, indent=1)


def median_or_dash(ratios):
    """The ratios' median, or "-" when allreduce was not run beside them."""
    return f"{statistics.median(ratios):.2f}" if ratios else "-"


def accuracy_table(groups, target):
    """Seconds to the target accuracy per configuration; a run that did not reach it (by
    --give-up) shows its last accuracy and counts as the seconds it ran."""
    print(f"| link | model | workers | straggler | mode | servers | seconds to {target:.0%} (median) | runs: seconds "
          "/ steps | vs allreduce (time, median of per-round ratios) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key, runs in groups.items():
        rate, model, workers, straggler, label, servers = key
        base = groups.get((rate, model, workers, straggler, "allreduce", 0))
        ratios = [r["seconds"] / b["seconds"] for r in runs for b in base or [] if b["round"] == r["round"]]
        each = " / ".join(f"{r['seconds']:.1f} s / {r['trained_steps']}" +
                          ("" if r["reached"] else f" (only {r['accuracy']:.3f})") for r in runs)
        print(f"| {rate} | {model} | {workers} | {straggler:g} | {label} | {servers or '-'} | "
              f"{statistics.median(r['seconds'] for r in runs):.1f} | {each} | {median_or_dash(ratios)} |")


def table(args):
    samples = [s for path in args.files for s in json.load(open(path))["samples"]]
    if args.json:  # first: the files given may be removed when this ends (ps_tbf.sh's hosts)
        with open(args.json, "w") as f:
            json.dump({"samples": samples}, f, indent=1)
    groups = collections.defaultdict(list)
    for s in samples:
        groups[s["rate"], s["model"], s["workers"], s["straggler"], s["label"], s["servers"]].append(s)
    targets = {s.get("target", 0.0) for s in samples}
    if len(targets) > 1:
        raise SystemExit(f"the files mix step-time runs and time-to-accuracy runs ({sorted(targets)})")
    if targets != {0.0}:
        accuracy_table(groups, targets.pop())
    else:
        step_table(groups)
    loads = [s["loadavg"] for s in samples]
    print(f"\n{len(samples)} runs; load average (1 min) at their starts: {min(loads):.1f}-{max(loads):.1f}.")


def wins(args):
    """Where each mode wins: per file (a set of interleaved rounds) and configuration, each mode's
    time to the target as the median of its per-round ratios to allreduce's, with the number of
    rounds it was ahead; the fastest mode by that median. Ratios never pair runs of two files.
    --pace: the ratio of the seconds to the last evaluation both runs made instead (the same
    step): whether a mode's steps are faster, apart from how many it needs."""
    cells, bases, labels = collections.defaultdict(list), collections.defaultdict(dict), set()
    for path in args.files:
        name = os.path.basename(path).removeprefix("ps_tbf_").removesuffix(".json")
        for s in json.load(open(path))["samples"]:
            if not s.get("target"):
                raise SystemExit(f"{path}: a step-time file; wins compares times to accuracy")
            setting = (name, s["rate"], s["workers"], s["straggler"])
            if s["label"] == "allreduce":
                bases[setting][s["round"]] = s
            else:
                cells[setting + (s["servers"],), s["label"]].append(s)
                labels.add(s["label"])

    def ratio(run, base):
        if not args.pace:
            return run["seconds"] / base["seconds"]
        run_at, base_at = ({step: seconds for step, _, seconds in r["history"]} for r in (run, base))
        step = max(run_at.keys() & base_at.keys())
        return run_at[step] / base_at[step]

    order = [m[0] for m in MODES if m[0] in labels]
    print("| set | link | workers | servers | straggler | " + " | ".join(order) + " | fastest |")
    print("| --- " * (6 + len(order)) + "|")
    rows = sorted({key for key, _ in cells}, key=lambda k: (k[2], k[4], k[1], k[3], k[0]))
    for key in rows:
        base, medians, shown = bases[key[:4]], {}, []
        for label in order:
            ratios = [ratio(r, base[r["round"]]) for r in cells.get((key, label), []) if r["round"] in base]
            if not ratios:
                shown.append("-")
                continue
            medians[label] = statistics.median(ratios)
            missed = sum(not r["reached"] for r in cells[key, label])
            shown.append(f"{medians[label]:.2f} ({sum(x < 1 for x in ratios)}/{len(ratios)})" +
                         (f", {missed} short" if missed and not args.pace else ""))
        best = min(medians, key=medians.get) if medians else "-"
        fastest = best if medians and medians[best] < 1 else "allreduce"
        name, rate, workers, straggler, servers = key
        print(f"| {name} | {rate} | {workers} | {servers} | {straggler:g} | " + " | ".join(shown) + f" | {fastest} |")
    measure = ("seconds to the last evaluation step both runs made" if args.pace else
               "time to the target (\"short\": runs that gave up before it, counted at the seconds they ran)")
    print(f"\nEach cell: the median of the per-round ratios to allreduce of the {measure}, below 1 ahead of "
          "allreduce, and (rounds ahead / rounds).")


def step_table(groups):
    print("| link | model | workers | straggler | mode | servers | images/s (median) | runs | vs allreduce "
          "| rank 0 step ms (median) | slowest worker step ms (median) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    med = lambda runs, key: statistics.median(r[key] for r in runs)
    for key, runs in groups.items():
        rate, model, workers, straggler, label, servers = key
        base = groups.get((rate, model, workers, straggler, "allreduce", 0))
        # Ratios of runs of one round (interleaved), then their median.
        ratios = [r["images_per_sec"] / b["images_per_sec"] for r in runs for b in base or []
                  if b["round"] == r["round"]]
        each = " / ".join(f"{r['images_per_sec']:.1f}" for r in runs)
        print(f"| {rate} | {model} | {workers} | {straggler:g} | {label} | {servers or '-'} | "
              f"{med(runs, 'images_per_sec'):.1f} | {each} | "
              f"{median_or_dash(ratios)} | {med(runs, 'step_ms'):.1f} | {med(runs, 'slowest_step_ms'):.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ns", nargs="+", required=True, help="the hosts' network namespaces")
    r.add_argument("--ips", nargs="+", required=True, help="their addresses, in the same order")
    r.add_argument("--ssh-key", required=True)
    r.add_argument("--rate", required=True, help="the links' cap, for the record")
    r.add_argument("--out", required=True)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--models", nargs="+", default=["cnn"], choices=["cnn", "wrn"])
    r.add_argument("--width", type=int, default=10)
    r.add_argument("--workers", nargs="+", type=int, default=[2, 4])
    r.add_argument("--servers", nargs="+", type=int, default=[1, 2])
    r.add_argument("--stragglers", nargs="+", type=float, default=[0.0, 0.5])
    r.add_argument("--modes", nargs="+", default=DEFAULT_MODES, choices=[m[0] for m in MODES],
                   metavar="MODE", help="of: " + ", ".join(repr(m[0]) for m in MODES))
    r.add_argument("--steps", type=int, default=0, help="timed steps (default: CNN 60, WRN 6)")
    r.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: CNN 10, WRN 2)")
    r.add_argument("--timeout", type=int, default=1800)
    r.add_argument("--target", type=float, default=0.0, help="time to this test accuracy (real data) instead")
    r.add_argument("--eval-every", type=int, default=50, help="with --target: steps between evaluations")
    r.add_argument("--give-up", type=float, default=600, help="with --target: seconds before a run stops trying")
    r.add_argument("--pin-cores", action="store_true",
                   help="worker r on core r mod cores (servers unpinned): with as many workers as cores, each "
                        "has one of its own, and a straggler's idle time is not lent to the others")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    t.add_argument("--json", default="")
    w = sub.add_parser("wins")
    w.add_argument("files", nargs="+")
    w.add_argument("--pace", action="store_true", help="seconds to a common step instead of to the target")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit: run_job stops the ranks
    {"run": run, "table": table, "wins": wins}[args.command](args)


if __name__ == "__main__":
    main()
