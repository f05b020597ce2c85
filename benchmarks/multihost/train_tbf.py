#!/usr/bin/env python3
"""Training across 2 hosts x 1 rank (network namespaces, see train_tbf.sh, which sets them up
and caps their links): hora vs PyTorch DDP (gloo), each without and with fp16 gradient
compression, on WRN-16-10 (global batch 32) and the CNN (global batch 128). The workers are
benchmarks/training/train_bench.py's (random data, images/sec over the timed steps).

  train_tbf.py run --ns NS1 NS2 --ips IP1 IP2 --ssh-key KEY --rate 1gbit --out FILE [--repeat 3]
      every configuration once per round, interleaved; every sample to FILE (JSON)
  train_tbf.py table FILE... [--json ALL]
      the markdown table of one or more rates' files

hora: horarun in the first host's namespace starts rank 0 there and rank 1 on the second host
over ssh (the hosts' sshd); each rank gets its host's name, so hora sees 2 hosts of 1 rank and
talks TCP over the capped link (checked: local_size 1, cross_size 2, else the run fails).
DDP: each rank started in its host's namespace, MASTER_ADDR the first host's address,
GLOO_SOCKET_IFNAME=eth0.
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
import train_bench as tb  # noqa: E402  (the workers, the hang guard, the per-run summary)

FRAMEWORKS = [("hora", "none"), ("hora", "fp16"), ("ddp", "none"), ("ddp", "fp16")]


def run_hora(args, argv):
    horarun = os.path.join(os.path.dirname(sys.executable), "horarun")
    cmd = ["ip", "netns", "exec", args.ns[0], horarun, "-i", args.ssh_key, "-np", "2",
           "-H", f"{args.ips[0]}:1,{args.ips[1]}:1", "-x", "HORA_LOG_LEVEL=error"] + argv
    ranks = tb.run_job([(cmd, dict(os.environ))], 2, args.timeout)
    for r in ranks:
        if r.get("local_size") != 1 or r.get("cross_size") != 2:
            raise RuntimeError(f"hora rank {r['rank']} saw local_size {r.get('local_size')}, cross_size "
                               f"{r.get('cross_size')}: the ranks must be on 2 hosts, or shared memory bypasses the link")
    return ranks


def run_ddp(args, argv, port):
    env = dict(os.environ, MASTER_ADDR=args.ips[0], MASTER_PORT=str(port), WORLD_SIZE="2", GLOO_SOCKET_IFNAME="eth0")
    commands = [(["ip", "netns", "exec", args.ns[r]] + argv, dict(env, RANK=str(r))) for r in range(2)]
    return tb.run_job(commands, 2, args.timeout)


def run(args):
    samples = []
    port = 29500  # a fresh port per DDP job: a former job's sockets may still hold the last one
    for rep in range(args.repeat):  # every configuration once per round: interleaved
        for model in args.models:
            steps, warmup = args.steps or tb.DEFAULT_STEPS[model][0], args.warmup or tb.DEFAULT_STEPS[model][1]
            for kind, compression in FRAMEWORKS:
                print(f"{args.rate} round {rep + 1}/{args.repeat}: {model} {kind} {compression}", file=sys.stderr,
                      flush=True)
                argv = tb.worker_argv(kind, model, args.width, steps, warmup, fp16=compression == "fp16")
                if kind == "hora":
                    ranks = run_hora(args, argv)
                else:
                    port += 1
                    ranks = run_ddp(args, argv, port)
                samples.append(dict(rate=args.rate, model=model, width=args.width, framework=kind,
                                    compression=compression, round=rep, steps=steps, warmup=warmup, **tb.summarize(ranks), ranks=ranks))
                with open(args.out, "w") as f:  # after every run: a failure later keeps what was measured
                    json.dump({"args": vars(args), "samples": samples}, f, indent=1)


def table(args):
    samples = [s for path in args.files for s in json.load(open(path))["samples"]]
    groups = collections.defaultdict(list)
    for s in samples:
        groups[s["rate"], s["model"], s["framework"], s["compression"]].append(s)
    rates = list(dict.fromkeys(s["rate"] for s in samples))
    models = list(dict.fromkeys(s["model"] for s in samples))
    repeat = max(s["round"] for s in samples) + 1
    print("| link | model | gradients | hora images/s (median) | hora runs | DDP images/s (median) | DDP runs "
          "| hora / DDP | hora framework CPU ms/step | DDP framework CPU ms/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rate in rates:
        for model in models:
            for compression in ("none", "fp16"):
                h, d = groups[rate, model, "hora", compression], groups[rate, model, "ddp", compression]
                if not h or not d:
                    continue
                label = ("CNN" if model == "cnn" else f"WRN-16-{h[0]['width']}") + \
                    f" (global batch {tb.GLOBAL_BATCH[model]})"
                med = lambda runs, key: statistics.median(s[key] for s in runs)
                runs = lambda runs: " / ".join(f"{s['images_per_sec']:.1f}" for s in runs)
                print(f"| {rate} | {label} | {'float32' if compression == 'none' else 'fp16'} | "
                      f"{med(h, 'images_per_sec'):.1f} | {runs(h)} | {med(d, 'images_per_sec'):.1f} | {runs(d)} | "
                      f"{med(h, 'images_per_sec') / med(d, 'images_per_sec'):.3f} | {med(h, 'framework_ms'):.1f} | "
                      f"{med(d, 'framework_ms'):.1f} |")
    steps = ", ".join(f"{m} {s['steps']} after {s['warmup']}" for m, s in
                      {s["model"]: s for s in samples}.items())
    print(f"\n2 namespace hosts x 1 rank x 1 thread, links capped with tc tbf on both ends; images/sec over the "
          f"timed steps ({steps} warm-up), median of {repeat} interleaved runs, runs in order; hora / DDP from "
          "medians, plain vs plain and fp16 vs fp16 (hora: Compression.fp16; DDP: fp16_compress_hook). Framework CPU: "
          "per rank and step, hora-* threads or gloo's.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--ns", nargs=2, required=True, help="the hosts' network namespaces")
    r.add_argument("--ips", nargs=2, required=True, help="their addresses (rank 0's first)")
    r.add_argument("--ssh-key", required=True, help="key for the hosts' sshd (horarun's remote rank)")
    r.add_argument("--rate", required=True, help="the links' cap, for the record")
    r.add_argument("--out", required=True)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--models", nargs="+", default=["wrn", "cnn"], choices=["cnn", "wrn"])
    r.add_argument("--width", type=int, default=10)
    r.add_argument("--steps", type=int, default=0, help="timed steps (default: CNN 60, WRN 6)")
    r.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: CNN 10, WRN 2)")
    r.add_argument("--timeout", type=int, default=1800, help="seconds for one run before it is stopped")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    t.add_argument("--json", default="", help="also write every sample of every file here")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit: run_job stops the ranks
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
