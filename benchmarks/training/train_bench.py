#!/usr/bin/env python3
"""Fashion-MNIST training throughput: hora vs PyTorch DDP (gloo) vs one process, same model and
global batch (CNN 128, WRN 32; each of N ranks takes global / N), every configuration
interleaved in one run (so that the machine's noise hits every configuration alike).

Configurations (images/sec over the timed steps after warm-up steps), for each N of --np:
  1 process x 1 thread, 1 process x 2 threads (global batch on one process),
  hora N x 1 thread (DistributedOptimizer), DDP gloo N x 1 thread,
  DDP with gradient sync off (no_sync: the compute-only bound of N x 1 thread).
Every process runs with OMP_NUM_THREADS = its threads: torch.set_num_threads does not size the
pool of Debian's OpenBLAS, which otherwise starts a thread per core in every rank.
Next to the step time: the CPU time of the framework's own threads per step, its share of the
process's CPU in the timed window, and the main thread's CPU per step (see thread_cpu()).

With --time-to-accuracy, hora and DDP runs alternate (A B A B ...) training the CNN on the real
data until the test accuracy reaches --target (same seed, data order, lr, evaluation every
--eval-every steps); each run reports seconds, steps, and the split between training and eval.

usage: benchmarks/training/train_bench.py [--models cnn wrn] [--np 2 4] [--repeat 3]
                                          [--time-to-accuracy] [--json FILE]   (prints markdown)
The hora runs need horarun next to the python running this (scripts/setup.sh's .venv).
"""

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))

GLOBAL_BATCH = {"cnn": 128, "wrn": 32}
DEFAULT_STEPS = {"cnn": (60, 10), "wrn": (6, 2)}  # (timed, warm-up)


def build(model, width):
    import fashion_mnist as fm
    return fm.small_cnn() if model == "cnn" else fm.wide_resnet(width)


# --- CPU time per thread -----------------------------------------------------------------------

def thread_cpu():
    """{tid: (name, ns on CPU, ns runnable but waiting for a CPU, times it was put on a CPU)} for
    every thread of this process: schedstat's three fields. stat's utime + stime (fields 14, 15)
    are only in clock ticks (10 ms), too coarse for a step of a few ms, so stat is only the
    fallback for kernels without schedstat (the other two fields are 0 then)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        base = f"/proc/self/task/{tid}"
        try:
            with open(base + "/comm") as f:
                name = f.read().strip()
            try:
                with open(base + "/schedstat") as f:
                    ns, waited, slices = (int(v) for v in f.read().split()[:3])
            except OSError:
                with open(base + "/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
                ns = (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")
                waited = slices = 0
        except (OSError, IndexError, ValueError):
            continue  # the thread exited while we looked
        out[int(tid)] = (name, ns, waited, slices)
    return out


def classify(tid, name, framework_threads):
    """main: the thread that runs the training loop. framework: hora's threads (named hora-*) and
    the threads born while the framework set itself up (init, wrapping the model or optimizer,
    the first broadcast): gloo's threads in torch 1.13 have no name of their own ("python").
    other: the rest, e.g. torch's intra-op (OpenMP) and BLAS pools, which come and go while
    training with several threads. The single-process configurations are the control: they
    must show no framework thread."""
    if tid == os.getpid():
        return "main"
    if name.startswith("hora-") or tid in framework_threads:
        return "framework"
    return "other"


def cpu_window(before, after, framework_threads):
    """Per thread alive at the end: name, class, ms on CPU, ms waiting for a CPU while runnable and
    times put on a CPU, between the two snapshots (a thread born inside the window counts from 0;
    one that died inside it is lost)."""
    rows = []
    for tid, (name, ns, waited, slices) in sorted(after.items()):
        _, ns0, waited0, slices0 = before.get(tid, (name, 0, 0, 0))
        rows.append({"tid": tid, "name": name, "class": classify(tid, name, framework_threads),
                     "cpu_ms": (ns - ns0) / 1e6, "runq_ms": (waited - waited0) / 1e6, "slices": slices - slices0})
    return rows


# --- workers -----------------------------------------------------------------------------------

def worker(args):
    if args.pin_core:
        # Before torch and hora start threads, which inherit it: rank r on core r mod cores (a
        # worker with a core of its own, as on a machine of its own, so a straggler's idle time is
        # lost to whoever waits for it rather than lent to them). horarun's HORA_RANK: hvd.init
        # would start the engine's threads first.
        os.sched_setaffinity(0, {int(os.environ["HORA_RANK"]) % os.cpu_count()})
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    before_setup = set(thread_cpu())  # threads born from here to the end of the set-up: the framework's
    kind = args.worker
    rank, size = 0, 1
    if kind == "hora":
        import hora.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    elif kind in ("ddp", "ddp-nosync"):
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = build(args.model, args.width)
    batch = GLOBAL_BATCH[args.model] // size
    # The learning rate scales with the ranks when their gradients are averaged into one update.
    # In ps-async every worker's push is an update of its own, so the rate stays one process's.
    scale = 1 if args.mode == "ps-async" else size
    if args.optimizer in ("adam", "adam-sqrt-lr"):  # --momentum is then Adam's beta1
        scale = scale ** 0.5 if args.optimizer == "adam-sqrt-lr" else scale
        opt = torch.optim.Adam(model.parameters(), lr=0.001 * scale, betas=(args.momentum, 0.999))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * scale, momentum=args.momentum)
    if kind == "hora":
        compression = hvd.Compression.fp16 if args.fp16 else hvd.Compression.none
        hvd.broadcast_parameters(model.state_dict(), 0)
        # mode/max_staleness: the parameter servers' modes (benchmarks/ps/ps_tbf.py).
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression,
                                       mode=args.mode, max_staleness=None if args.max_staleness < 0 else
                                       args.max_staleness)
    elif kind.startswith("ddp"):
        # Broadcasts rank 0's parameters and buffers now, and its buffers again before every
        # forward (broadcast_buffers: WRN's BatchNorm statistics; hora leaves them per rank).
        model = torch.nn.parallel.DistributedDataParallel(model)
        if args.fp16:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)

    def barrier():
        if kind == "hora":
            hvd.barrier()
        elif kind.startswith("ddp"):
            dist.barrier()

    barrier()
    framework_threads = set(thread_cpu()) - before_setup

    # --straggler f: the last rank idles f times its own compute time before each update
    # (a worker on a slower machine).
    straggle = args.straggler if rank == size - 1 else 0.0

    def train_step(x, y):
        opt.zero_grad()
        begun = time.time()
        if kind == "ddp-nosync":
            with model.no_sync():
                F.cross_entropy(model(x), y).backward()
        else:
            F.cross_entropy(model(x), y).backward()
        if straggle:
            time.sleep(straggle * (time.time() - begun))
        opt.step()

    result = {"rank": rank, "size": size, "host": os.environ.get("HORA_HOSTNAME", os.uname().nodename),
              "cpus": sorted(os.sched_getaffinity(0))}
    if kind == "hora":
        result.update(local_size=hvd.local_size(), cross_size=hvd.cross_size())
    if args.target:  # time to accuracy on the real data
        import fashion_mnist as fm
        x_train, y_train, x_test, y_test = fm.load(fm.DATA)
        mean, std = x_train.float().mean() / 255, x_train.float().std() / 255
        prep = lambda x: ((x.float() / 255 - mean) / std).unsqueeze(1)
        g = torch.Generator().manual_seed(7)
        order = torch.randperm(len(x_train), generator=g)
        mine_test = slice(rank, len(x_test), size)
        # Fingerprints to compare hora's run with DDP's: the weights every rank starts from and
        # the first images this rank trains on.
        result["start_weights_sum"] = sum(p.detach().double().sum().item() for p in model.parameters())
        result["first_batch"] = order[rank * batch:][:4].tolist()
        result["lr"] = opt.param_groups[0]["lr"]

        def evaluate():
            # In slices of 64 images: one forward over the whole shard (2,500 images, ~1.3 GB of
            # activations) spent its time in page faults, and evaluation took most of the run
            # (measured here, 1 thread: slices of 500 already take twice as long as slices of 64).
            model.eval()
            correct = 0.0
            with torch.no_grad():
                for x, y in zip(x_test[mine_test].split(64), y_test[mine_test].split(64)):
                    correct += (model(prep(x)).argmax(1) == y).float().sum().item()
            model.train()
            stats = torch.tensor([correct, float(len(y_test[mine_test]))])
            if kind == "hora":
                stats = hvd.allreduce(stats, op=hvd.Sum, name="eval")
            else:
                dist.all_reduce(stats)
            return (stats[0] / stats[1]).item()

        barrier()
        # Wall and CPU time (ms per thread class) of the training steps and of the evaluations apart.
        phases = {"train": collections.Counter(), "eval": collections.Counter()}

        def timed(phase, fn):
            cpu, t = thread_cpu(), time.time()
            out = fn()
            phases[phase]["wall"] += 1000 * (time.time() - t)
            for row in cpu_window(cpu, thread_cpu(), framework_threads):
                phases[phase][row["class"]] += row["cpu_ms"]
            return out

        def train_steps():
            for i in range(step, step + args.eval_every):
                idx = order[(i * GLOBAL_BATCH[args.model] + rank * batch) % len(order):][:batch]
                train_step(prep(x_train[idx]), y_train[idx])

        start, step, accuracy, history = time.time(), 0, 0.0, []
        while accuracy < args.target and time.time() - start < args.give_up:
            timed("train", train_steps)
            step += args.eval_every
            accuracy = timed("eval", evaluate)
            history.append([step, round(accuracy, 4), round(time.time() - start, 2)])
        result.update(seconds=time.time() - start, steps=step, accuracy=accuracy, history=history,
                      train_ms=dict(phases["train"]), eval_ms=dict(phases["eval"]))
    else:
        x = torch.randn(batch, 1, 28, 28)
        y = torch.randint(0, 10, (batch,))
        for _ in range(args.warmup):
            train_step(x, y)
        barrier()
        cpu_start, start = thread_cpu(), time.time()
        for _ in range(args.steps):
            train_step(x, y)
        own = time.time() - start  # this rank's steps alone (in ps-async the others may still run)
        barrier()
        elapsed, cpu_end = time.time() - start, thread_cpu()
        result.update(seconds=elapsed, own_seconds=own, batch=batch, steps=args.steps,
                      images_per_sec=args.steps * batch * size / elapsed,
                      threads=cpu_window(cpu_start, cpu_end, framework_threads))
    print("RESULT " + json.dumps(result), flush=True)  # every rank: each has its own threads
    if kind == "hora":
        hvd.shutdown()
    elif kind.startswith("ddp"):
        dist.destroy_process_group()


# --- driver ------------------------------------------------------------------------------------

def stop(procs):
    """SIGTERM to the process group of every process still running (horarun passes it on to its
    ranks, local and remote), SIGKILL to those still there 10 s later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        end = time.time() + 10
        while time.time() < end and any(p.poll() is None for p in alive):
            time.sleep(0.1)


def run_job(commands, ranks, timeout, grace=15):
    """Runs (argv, env) pairs, each in its own process group, to the end and returns the RESULT
    dicts they printed, in rank order. The guard against hangs: torch 1.13 + gloo sometimes
    hangs at exit, after its results are out; processes still running `grace` s after every
    rank's RESULT arrived, or at `timeout`, are stopped. On any exception (Ctrl-C, SIGTERM
    turned into SystemExit) they are stopped too: no rank outlives the benchmark."""
    with tempfile.TemporaryDirectory() as tmp:
        procs, outs = [], []
        try:
            for i, (argv, env) in enumerate(commands):
                outs.append(open(os.path.join(tmp, f"{i}.out"), "w+"))
                procs.append(subprocess.Popen(argv, env=env, stdout=outs[-1], stderr=subprocess.STDOUT,
                                              start_new_session=True))
            text = lambda: "".join(open(out.name).read() for out in outs)
            deadline, complete_at = time.time() + timeout, None
            while any(p.poll() is None for p in procs):
                if complete_at is None and text().count("RESULT ") >= ranks:
                    complete_at = time.time()
                if complete_at and time.time() - complete_at > grace:
                    print(f"  (still running {grace} s after their results: stopped)", file=sys.stderr)
                    break
                if time.time() > deadline:
                    print(f"  (timeout after {timeout} s: stopped)", file=sys.stderr)
                    break
                time.sleep(0.2)
        finally:
            stop(procs)
            for out in outs:
                out.close()
        output = text()
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]
    if len(results) < ranks:
        raise RuntimeError(f"{len(results)} of {ranks} ranks reported a result:\n{output[-4000:]}")
    return sorted(results, key=lambda r: r["rank"])


def worker_argv(kind, model, width, steps, warmup, threads=1, target=0.0, eval_every=50, fp16=False,
                python=sys.executable, mode="allreduce", max_staleness=-1, straggler=0.0, momentum=0.9, give_up=600,
                optimizer="sgd", pin_core=False):
    return [python, os.path.abspath(__file__), "--worker", kind, "--model", model, "--width", str(width),
            "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads), "--target", str(target),
            "--eval-every", str(eval_every), "--mode", mode, "--max-staleness", str(max_staleness),
            "--straggler", str(straggler), "--momentum", str(momentum), "--give-up", str(give_up),
            "--optimizer", optimizer] + \
        (["--fp16"] if fp16 else []) + (["--pin-core"] if pin_core else [])


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(kind, np, argv, timeout=3600, extra_env=None):
    """One job of `np` ranks on this host (extra_env: more variables for it); returns the ranks'
    results."""
    env = {**os.environ, "HORA_LOG_LEVEL": "error", **(extra_env or {})}
    if kind == "hora":
        horarun = os.path.join(os.path.dirname(sys.executable), "horarun")
        commands = [([horarun, "-np", str(np)] + argv, env)]
    elif kind.startswith("ddp"):
        port = free_port()
        commands = [(argv, dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                                WORLD_SIZE=str(np))) for r in range(np)]
    else:
        commands = [(argv, env)]
    return run_job(commands, np, timeout)


def summarize(ranks):
    """One run's figures from its ranks' results: images/sec and step time as rank 0 measured
    them; CPU per step averaged over the ranks, the framework's share over all their CPU."""
    steps = ranks[0]["steps"]
    by_class, slices = collections.Counter(), collections.Counter()
    for r in ranks:
        for t in r["threads"]:
            by_class[t["class"]] += t["cpu_ms"]
            slices[t["class"]] += t.get("slices", 0)
    total = sum(by_class.values())
    return {"images_per_sec": ranks[0]["images_per_sec"], "step_ms": ranks[0]["seconds"] / steps * 1000,
            "framework_ms": by_class["framework"] / len(ranks) / steps,
            "framework_pct": 100 * by_class["framework"] / total if total else 0.0,
            "framework_slices": slices["framework"] / len(ranks) / steps,
            "main_ms": by_class["main"] / len(ranks) / steps,
            "other_ms": by_class["other"] / len(ranks) / steps}


def thread_names(ranks):
    """'main: python; framework: hora-engine x1' for the rank with the most threads."""
    r = max(ranks, key=lambda r: len(r["threads"]))
    parts = []
    for cls in ("main", "framework", "other"):
        names = collections.Counter(t["name"] for t in r["threads"] if t["class"] == cls)
        parts.append(f"{cls}: " + (", ".join(f"{n} x{c}" for n, c in sorted(names.items())) or "-"))
    return f"rank {r['rank']}: " + "; ".join(parts)


def throughput(args, record):
    Config = collections.namedtuple("Config", "name kind np threads env", defaults=[{}])
    configs = [] if args.no_single else [Config("1 process x 1 thread", "single", 1, 1),
                                         Config("1 process x 2 threads", "single", 1, 2)]
    for n in args.np:
        configs += [Config(f"hora {n} x 1 thread", "hora", n, 1)]
        for variant in args.hora_variant:  # the same job with other knobs, e.g. HORA_SHM_INBOX_BYTES=1M
            knobs = dict(kv.split("=", 1) for kv in variant.split(","))
            configs += [Config(f"hora {n} x 1 thread ({variant})", "hora", n, 1, knobs)]
        configs += [Config(f"DDP (gloo) {n} x 1 thread", "ddp", n, 1),
                    Config(f"DDP, sync off (compute bound) {n} x 1 thread", "ddp-nosync", n, 1)]
    samples = collections.defaultdict(list)  # (model, config name) -> summaries
    names_seen = {}
    for rep in range(args.repeat):  # every configuration once per round: interleaved
        for model in args.models:
            steps, warmup = args.steps or DEFAULT_STEPS[model][0], args.warmup or DEFAULT_STEPS[model][1]
            for c in configs:
                print(f"round {rep + 1}/{args.repeat}: {model} {c.name}", file=sys.stderr, flush=True)
                # OMP_NUM_THREADS sizes the BLAS pool (Debian's torch uses OpenBLAS, which
                # torch.set_num_threads leaves alone): "x 1 thread" must mean one thread of math.
                ranks = run_config(c.kind, c.np, worker_argv(c.kind, model, args.width, steps, warmup, c.threads),
                                   extra_env={"OMP_NUM_THREADS": str(c.threads), **c.env})
                s = summarize(ranks)
                samples[model, c.name].append(s)
                names_seen[c.name] = thread_names(ranks)
                record["throughput"].append(dict(model=model, config=c.name, kind=c.kind, np=c.np, threads=c.threads,
                                                 round=rep, steps=steps, warmup=warmup, **s, ranks=ranks))
    print_throughput(args, configs, samples, names_seen)


def print_throughput(args, configs, samples, names_seen):
    print("| model | configuration | images/sec (median) | runs | step ms (median) | vs DDP | vs compute bound "
          "| framework CPU ms/step | framework % of process CPU | framework threads' runs on a CPU per step "
          "| main thread CPU ms/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in args.models:
        label = "CNN" if model == "cnn" else f"WRN-16-{args.width}"
        for c in configs:
            runs = samples[model, c.name]
            med = {key: statistics.median(s[key] for s in runs) for key in runs[0]}
            n = c.np if c.np > 1 else args.np[0]  # one process: against the first --np's DDP and bound
            ddp, bound = (statistics.median(s["images_per_sec"] for s in samples[model, f"{name} {n} x 1 thread"])
                          for name in ("DDP (gloo)", "DDP, sync off (compute bound)"))
            print(f"| {label} (global batch {GLOBAL_BATCH[model]}) | {c.name} | {med['images_per_sec']:.1f} | "
                  + " / ".join(f"{s['images_per_sec']:.1f}" for s in runs)
                  + f" | {med['step_ms']:.1f} | {med['images_per_sec'] / ddp:.3f} | {med['images_per_sec'] / bound:.3f} | "
                  f"{med['framework_ms']:.2f} | {med['framework_pct']:.1f} | {med['framework_slices']:.0f} | "
                  f"{med['main_ms']:.1f} |")
    print(f"\nMedian of {args.repeat} interleaved runs; runs in order. Ratios from medians, against DDP and the "
          f"sync-off bound with the same ranks (one process: against {args.np[0]} ranks). CPU: per rank and step "
          "over the timed window (/proc/self/task/*/schedstat); framework = hora-* threads, or threads born "
          "during the framework's set-up (gloo's are unnamed). In a VM that does not report steal time, a "
          "thread's CPU time includes the time the host preempted its vCPU.")
    print("\nThreads seen (name x count, on the rank with the most):\n")
    for c in configs:
        print(f"- {c.name}: {names_seen[c.name]}")


def tta_summary(ranks):
    """One time-to-accuracy run: rank 0's clock; training's CPU per step averaged over the ranks."""
    r0, n = ranks[0], len(ranks)
    cpu = lambda cls: sum(r["train_ms"].get(cls, 0.0) for r in ranks) / n / r0["steps"]
    return {"seconds": r0["seconds"], "steps": r0["steps"], "accuracy": r0["accuracy"],
            "train_s": r0["train_ms"]["wall"] / 1000, "eval_s": r0["eval_ms"]["wall"] / 1000,
            "step_ms": r0["train_ms"]["wall"] / r0["steps"], "main_ms": cpu("main"), "framework_ms": cpu("framework")}


def time_to_accuracy(args, record):
    runs = {"hora": [], "ddp": []}
    for rep in range(args.repeat):
        for kind in ("hora", "ddp"):  # alternating: A B A B
            print(f"time to accuracy {rep + 1}/{args.repeat}: {kind}", file=sys.stderr, flush=True)
            ranks = run_config(kind, 2, worker_argv(kind, "cnn", 1, 0, 0, target=args.target,
                                                    eval_every=args.eval_every), extra_env={"OMP_NUM_THREADS": "1"})
            runs[kind].append(tta_summary(ranks))
            record["time_to_accuracy"].append(dict(kind=kind, round=rep, **runs[kind][-1], ranks=ranks))
    print(f"\n| model | framework | seconds to {args.target:.0%} test accuracy (median) | steps (median) "
          "| training step ms (median) | main thread CPU ms/step | framework CPU ms/step "
          "| runs: seconds / steps / accuracy (training s + eval s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, name in (("hora", "hora"), ("ddp", "DDP (gloo)")):
        rs = runs[kind]
        med = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        print(f"| CNN (global batch 128, 2 x 1 thread) | {name} | {med['seconds']:.1f} | {med['steps']:.0f} | "
              f"{med['step_ms']:.1f} | {med['main_ms']:.1f} | {med['framework_ms']:.2f} | "
              + ", ".join(f"{r['seconds']:.1f} s / {r['steps']} / {r['accuracy']:.3f} ({r['train_s']:.1f} + "
                          f"{r['eval_s']:.1f})" for r in rs) + " |")
    first = {kind: record_ranks[0] for kind, record_ranks in
             ((t["kind"], t["ranks"]) for t in reversed(record["time_to_accuracy"]))}
    print(f"\nRuns alternate hora, DDP; rank 0's clock from the first step to the evaluation that reached the "
          f"target (evaluated every {args.eval_every} steps); CPU per rank over the training steps only. "
          "Same start? Sum of the initial weights: "
          + ", ".join(f"{kind} {first[kind]['start_weights_sum']:.6f}" for kind in first)
          + "; rank 0's first images: " + ", ".join(f"{kind} {first[kind]['first_batch']}" for kind in first)
          + "; lr: " + ", ".join(f"{kind} {first[kind]['lr']}" for kind in first) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["cnn", "wrn"], choices=["cnn", "wrn"],
                    help="models of the throughput table (none: only --time-to-accuracy)")
    ap.add_argument("--np", nargs="+", type=int, default=[2, 4], help="ranks of the distributed configurations")
    ap.add_argument("--width", type=int, default=10, help="WideResNet width (10: WRN-16-10)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: CNN 60, WRN 6)")
    ap.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: CNN 10, WRN 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-single", action="store_true", help="leave out the single-process configurations")
    ap.add_argument("--hora-variant", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                    help="also run hora with these knobs, interleaved with the rest (repeatable)")
    ap.add_argument("--time-to-accuracy", action="store_true", help="also hora vs DDP to --target (CNN, 2 ranks)")
    ap.add_argument("--target", type=float, default=0.85, help="test accuracy for --time-to-accuracy")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--json", default="", help="write every sample (every rank's threads too) to this file")
    # A worker (started by the driver above, or by benchmarks/multihost/train_tbf.py):
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="cnn", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--fp16", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pin-core", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="allreduce", help=argparse.SUPPRESS)
    ap.add_argument("--max-staleness", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--straggler", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--momentum", type=float, default=0.9, help=argparse.SUPPRESS)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adam-sqrt-lr"], help=argparse.SUPPRESS)
    ap.add_argument("--give-up", type=float, default=600, help=argparse.SUPPRESS)  # seconds to the target
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit: run_job stops the ranks
    record = {"args": vars(args), "throughput": [], "time_to_accuracy": []}
    if args.models:
        throughput(args, record)
    if args.time_to_accuracy:
        time_to_accuracy(args, record)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
