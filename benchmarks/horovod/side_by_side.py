#!/usr/bin/env python3
"""hora and Horovod 0.28.1 side by side on this machine: the same scripts, each started by its
own framework's `horovodrun`, runs interleaved (hora, Horovod, hora, Horovod, ...).

hora's runs use hora's .venv with the `horovod` alias (python/horovod_compat) installed, so that
`import horovod.torch as hvd` is hora.torch and `horovodrun` is horarun; Horovod's use the
virtual environment benchmarks/horovod/setup_horovod.sh built (`horovodrun --gloo`). Sets:

  synthetic  Horovod's examples/pytorch/pytorch_synthetic_benchmark.py (from Horovod's unpacked
             sdist, else from the Horovod mirror's git at v0.28.1), per --synthetic, total img/s
  cnn        workloads.py cnn: the Fashion-MNIST example's CNN, global batch 128, images/s
  wrn        workloads.py wrn: its WRN-16-10, global batch 32, images/s over 8 steps
  tta        workloads.py tta: the CNN on the real data to 85% test accuracy, seconds
  keras      benchmarks/tensorflow/keras_bench.py's worker with `import horovod.tensorflow.keras`:
             model.fit of the CNN (global batch 128) and of the tutorial's WideResNet (WRN-16-10,
             global batch 32) on random images, 1 intra-op and 1 inter-op thread per rank, images/s
  tutorial   keras_tutorial.py: the tutorial's Keras script (examples/keras/fashion_mnist.py, its
             default narrow WideResNet) trained to 85% validation accuracy: seconds to the target
  allreduce  workloads.py allreduce: 4-byte latency, busbw at 1, 16, 64 MiB
  elastic    workloads.py elastic on 2 ranks of 2 one-slot "hosts" (localhost, 127.0.0.1, from a
             discovery script); rank 1 is SIGKILLed at step 30: seconds to the first step at size 1
  failures   workloads.py fail on 2 ranks: rank 1 SIGKILLed, rank 1 SIGSTOPped, a shape mismatch:
             the first lines printed after the event, seconds until every process has ended
             (launcher and its descendants; capped at --cap seconds)

Every rank runs with one thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)). Every launch has a
timeout. The load average is recorded before and after each set.

usage: benchmarks/horovod/side_by_side.py [--sets ...] [--repeat 3] [--np 2 4]
           [--synthetic resnet18 resnet50:2 ...] [--horovod-dir ~/.cache/hora-bench] [--json FILE]
(run with hora's .venv/bin/python; prints markdown)
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKLOADS = os.path.join(HERE, "workloads.py")
KERAS_BENCH = os.path.join(ROOT, "benchmarks", "tensorflow", "keras_bench.py")
KERAS_TUTORIAL = os.path.join(HERE, "keras_tutorial.py")
KERAS_STEPS = {"cnn": 200, "wrn": 12}  # timed steps, after 5 warm-up steps
MIRROR = "/work/.mirror/horovod+horovod/repo"
SYNTHETIC = "examples/pytorch/pytorch_synthetic_benchmark.py"
STEP = re.compile(r"STEP (\d+) size (\d+) rank (\d+) pid (\d+) t ([\d.]+)")


class Framework:
    def __init__(self, name, venv, extra):
        self.name, self.venv, self.extra = name, venv, extra
        self.python = os.path.join(venv, "bin", "python")
        self.horovodrun = os.path.join(venv, "bin", "horovodrun")

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HORA_"))}
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   PATH=os.path.join(self.venv, "bin") + os.pathsep + env.get("PATH", ""))
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        return env

    def command(self, launcher_args, script_args):
        return [self.horovodrun] + self.extra + launcher_args + [self.python] + script_args


def frameworks(args):
    hora = Framework("hora", os.path.join(ROOT, ".venv"), [])
    horovod = Framework("Horovod", os.path.join(args.horovod_dir, "horovod-venv"), ["--gloo"])
    check = "import horovod, horovod.torch as h; print(horovod.__version__, h.__name__)"
    for fw in (hora, horovod):
        out = subprocess.run([fw.python, "-c", check], capture_output=True, text=True, env=fw.env(),
                             timeout=120)
        if out.returncode != 0:
            sys.exit(f"{fw.name}: `import horovod.torch` fails in {fw.venv}:\n{out.stderr[-2000:]}\n"
                     "(hora: pip install --no-build-isolation --no-deps --no-index python/horovod_compat;"
                     " Horovod: benchmarks/horovod/setup_horovod.sh)")
        print(f"<!-- {fw.name}: {fw.python}: horovod {out.stdout.strip()} -->", flush=True)
    if "hora" not in subprocess.run([hora.python, "-c", "import horovod.torch as h; print(h.init.__module__)"],
                                    capture_output=True, text=True, env=hora.env(), timeout=120).stdout:
        sys.exit("hora's .venv: `horovod.torch` is not hora's")
    return [hora, horovod]


def synthetic_script(args, workdir):
    """Horovod's synthetic benchmark, from the unpacked sdist setup_horovod.sh keeps if it has it
    (0.28.1's has no examples), else from the Horovod mirror's git at the tag v0.28.1, written to
    the run's temporary directory only."""
    local = os.path.join(args.horovod_dir, "horovod-0.28.1", SYNTHETIC)
    if os.path.exists(local):
        return local
    text = subprocess.run(["git", "-C", MIRROR, "show", "v0.28.1:" + SYNTHETIC], check=True,
                          capture_output=True, text=True, timeout=60).stdout
    path = os.path.join(workdir, os.path.basename(SYNTHETIC))
    with open(path, "w") as f:
        f.write(text)
    return path


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- processes -----------------------------------------------------------------------------------

def descendants(pid):
    """pid and every process below it now (from /proc's parent links)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_all(pids):
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGCONT)
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


class Launch:
    """One launcher process (in a session of its own) whose output lines are collected, each with
    the time it was read, by a thread."""

    def __init__(self, cmd, env, timeout):
        self.cmd = cmd
        self.start = time.time()
        self.proc = subprocess.Popen(["timeout", "-k", "5", str(timeout)] + cmd, env=env, cwd=HERE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, errors="replace")
        self.lines = []  # (time, line)
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.time(), line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """The first (time, line, match) whose line satisfies predicate (returns a match or None)."""
        deadline = time.time() + timeout
        seen = 0
        with self.cond:
            while True:
                for t, line in self.lines[seen:]:
                    m = predicate(line)
                    if m:
                        return t, line, m
                seen = len(self.lines)
                left = deadline - time.time()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    return None
                self.cond.wait(min(left, 0.5))

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.stop()
        self.reader.join(5)
        return self.proc.returncode

    def stop(self):
        kill_all(descendants(self.proc.pid))

    def output(self):
        return "\n".join(line for _, line in self.lines)


def run(cmd, env, timeout):
    launch = Launch(cmd, env, timeout)
    code = launch.finish(timeout + 10)
    return code, launch.output(), time.time() - launch.start


def step_of(line):
    return STEP.search(line)


# --- sets ----------------------------------------------------------------------------------------

def interleaved(fws, repeat, one):
    """Runs one(fw) for fw in fws, repeat times: A B A B ...; returns {name: [result...]}."""
    out = {fw.name: [] for fw in fws}
    for r in range(repeat):
        for fw in fws:
            res = one(fw)
            res["round"] = r
            out[fw.name].append(res)
            print(f"<!-- {fw.name} round {r}: {json.dumps(res)[:300]} -->", flush=True)
    return out


def set_synthetic(args, fws, work):
    script = synthetic_script(args, work)
    results = []
    for config in args.synthetic:
        model, _, np_ = config.partition(":")
        for np_ in [int(np_)] if np_ else args.np:
            batch = args.batch[model] if isinstance(args.batch, dict) else args.batch

            def one(fw):
                cmd = fw.command(["-np", str(np_)], [script, "--model", model, "--batch-size", str(batch),
                                                     "--num-warmup-batches", "2", "--num-batches-per-iter",
                                                     str(args.batches_per_iter), "--num-iters", "3"])
                code, out, secs = run(cmd, fw.env(), args.timeout)
                m = re.search(r"Total img/sec on \d+ CPU\(s\): ([\d.]+) \+-([\d.]+)", out)
                return {"images_per_sec": float(m.group(1)) if m else None, "code": code,
                        "seconds": round(secs, 1), "tail": None if m else out[-1500:]}

            results.append({"model": model, "np": np_, "batch": batch, "load_before": load(),
                            "runs": interleaved(fws, args.repeat, one), "load_after": load()})
    return results


def set_workload(args, fws, name, extra=()):
    results = []
    for np_ in args.np:
        def one(fw):
            cmd = fw.command(["-np", str(np_)], [WORKLOADS, name] + list(extra))
            code, out, secs = run(cmd, fw.env(), args.timeout)
            m = re.search(r"RESULT (\{.*\})", out)
            res = json.loads(m.group(1)) if m else {"tail": out[-1500:]}
            res.update(code=code, seconds=round(secs, 1))
            return res

        results.append({"np": np_, "load_before": load(), "runs": interleaved(fws, args.repeat, one),
                        "load_after": load()})
    return results


def set_keras(args, fws):
    results = []
    for model in args.keras:
        for np_ in args.np:
            def one(fw):
                cmd = fw.command(["-np", str(np_)], [KERAS_BENCH, "--worker", "hora", "--api", "horovod.tensorflow.keras",
                                                     "--model", model, "--ranks", str(np_),
                                                     "--steps", str(KERAS_STEPS[model]), "--warmup", "5"])
                code, out, secs = run(cmd, dict(fw.env(), TF_CPP_MIN_LOG_LEVEL="2"), args.timeout)
                m = re.search(r"RESULT rank=0 images_per_s=([\d.]+)", out)
                return {"images_per_sec": float(m.group(1)) if m else None, "code": code,
                        "seconds": round(secs, 1), "tail": None if m else out[-1500:]}

            results.append({"model": model, "np": np_, "load_before": load(),
                            "runs": interleaved(fws, args.repeat, one), "load_after": load()})
    return results


def set_tutorial(args, fws, work):
    results = []
    for np_ in args.np:
        def one(fw):
            cmd = fw.command(["-np", str(np_)], [KERAS_TUTORIAL, "--checkpoint", "", "--log-dir", work])
            code, out, secs = run(cmd, dict(fw.env(), TF_CPP_MIN_LOG_LEVEL="2"), args.timeout)
            m = re.search(r"RESULT accuracy=([\d.]+) .*time_to_target_s=(\S+) train_time_s=([\d.]+)", out)
            return {"accuracy": float(m.group(1)) if m else None, "time_to_target_s": float(m.group(2)) if m else None,
                    "train_time_s": float(m.group(3)) if m else None, "code": code, "seconds": round(secs, 1),
                    "tail": None if m else out[-1500:]}

        results.append({"np": np_, "load_before": load(), "runs": interleaved(fws, args.repeat, one),
                        "load_after": load()})
    return results


def set_elastic(args, fws, work):
    discovery = os.path.join(work, "discover.sh")
    with open(discovery, "w") as f:
        f.write("#!/bin/sh\necho localhost:1\necho 127.0.0.1:1\n")
    os.chmod(discovery, 0o755)
    kill_step, steps = 30, 90

    def one(fw):
        cmd = fw.command(["-np", "2", "--min-np", "1", "--max-np", "2", "--host-discovery-script", discovery],
                         [WORKLOADS, "elastic", "--steps", str(steps)])
        launch = Launch(cmd, fw.env(), args.timeout)
        res = {}
        hit = launch.wait_for(lambda l: (m := step_of(l)) and int(m.group(1)) >= kill_step
                              and m.group(2) == "2" and m.group(3) == "1" and m, args.timeout)
        if hit:
            pid = int(hit[2].group(4))
            os.kill(pid, signal.SIGKILL)
            killed = time.time()
            after = launch.wait_for(lambda l: (m := step_of(l)) and m.group(2) == "1"
                                    and float(m.group(5)) > killed and m, args.timeout)
            if after:
                res["recovery_s"] = round(float(after[2].group(5)) - killed, 3)
                res["resumed_at_step"] = int(after[2].group(1))
            res["killed_at_step"] = int(hit[2].group(1))
        code = launch.finish(args.timeout)
        res.update(code=code, seconds=round(time.time() - launch.start, 1))
        if "recovery_s" not in res:
            res["tail"] = launch.output()[-2000:]
        else:
            res["after_kill"] = [l for t, l in launch.lines if t >= killed and not STEP.search(l)][:8]
        return res

    return [{"np": 2, "load_before": load(), "runs": interleaved(fws, args.repeat, one), "load_after": load()}]


def set_failures(args, fws, work):
    results = []
    for mode in args.failure_modes:
        def one(fw):
            cmd = fw.command(["-np", "2"], [WORKLOADS, "fail", "--mode", mode])
            launch = Launch(cmd, fw.env(), args.cap + 30)
            res = {}
            first = 20 if mode != "mismatch" else 0
            hit = launch.wait_for(lambda l: (m := step_of(l)) and int(m.group(1)) >= first
                                  and m.group(3) == "1" and m, 120)
            event = time.time()
            if hit is None:
                res["error"] = "no step seen"
            elif mode == "kill":
                os.kill(int(hit[2].group(4)), signal.SIGKILL)
            elif mode == "stop":
                os.kill(int(hit[2].group(4)), signal.SIGSTOP)
            event = time.time()
            pids = descendants(launch.proc.pid)
            ended = None
            while time.time() - event < args.cap:
                pids = sorted(set(pids) | set(descendants(launch.proc.pid)))
                if not any(alive(p) for p in pids):
                    ended = time.time() - event
                    break
                time.sleep(0.05)
            res["ended_s"] = round(ended, 2) if ended is not None else None
            res["still_running"] = [] if ended is not None else [p for p in pids if alive(p)]
            launch.stop()
            code = launch.finish(10)
            res["code"] = code
            res["first_lines"] = [l for t, l in launch.lines if t >= event - 0.01 and not STEP.search(l)][:60]
            return res

        results.append({"mode": mode, "np": 2, "load_before": load(),
                        "runs": interleaved(fws, args.failure_repeat, one), "load_after": load()})
    return results


# --- tables --------------------------------------------------------------------------------------

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def rows_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def gist(lines):
    """The first 3 lines printed after the event, then those that say what failed (an error's
    text, the launcher's own lines), up to 10 in all."""
    keep = lines[:3]
    for line in lines[3:]:
        if len(keep) >= 10:
            break
        if re.search(r"Error|error|horarun:|hora .* E |Process \d+ exit|Mismatch|mismatch", line) and line not in keep:
            keep.append(line)
    return "\n```\n" + "\n".join(l[:300] for l in keep) + "\n```"


def table(results):
    out = []
    if "synthetic" in results:
        rows = []
        for s in results["synthetic"]:
            h = [r["images_per_sec"] for r in s["runs"]["hora"]]
            v = [r["images_per_sec"] for r in s["runs"]["Horovod"]]
            rows.append([s["model"], s["np"], s["batch"], fmt(med(h)), " / ".join(fmt(x) for x in h),
                         fmt(med(v)), " / ".join(fmt(x) for x in v), ratio(med(h), med(v)),
                         f"{s['load_before']} -> {s['load_after']}"])
        out.append("### pytorch_synthetic_benchmark.py (total img/s)\n\n" + rows_table(
            ["model", "ranks", "batch per rank", "hora (median)", "hora runs", "Horovod (median)",
             "Horovod runs", "hora / Horovod", "load before -> after"], rows))
    for name, title in (("cnn", "Fashion-MNIST CNN, global batch 128"), ("wrn", "WRN-16-10, global batch 32")):
        if name not in results:
            continue
        rows = []
        for s in results[name]:
            h = [r.get("images_per_sec") for r in s["runs"]["hora"]]
            v = [r.get("images_per_sec") for r in s["runs"]["Horovod"]]
            rows.append([s["np"], fmt(med(h)), " / ".join(fmt(x) for x in h), fmt(med(v)),
                         " / ".join(fmt(x) for x in v), ratio(med(h), med(v)),
                         f"{s['load_before']} -> {s['load_after']}"])
        out.append(f"### {title}, PyTorch (images/s)\n\n" + rows_table(
            ["ranks", "hora (median)", "hora runs", "Horovod (median)", "Horovod runs", "hora / Horovod",
             "load before -> after"], rows))
    if "tta" in results:
        rows = []
        for s in results["tta"]:
            def runs(fw):
                return [r.get("seconds") if r.get("reached") else None for r in s["runs"][fw]]

            def each(fw):
                return " / ".join(f"{r['seconds']:.1f} s, {r['steps']} steps" if r.get("reached") else
                                  "not reached" for r in s["runs"][fw])
            h, v = runs("hora"), runs("Horovod")
            rows.append([s["np"], fmt(med(h)), each("hora"), fmt(med(v)), each("Horovod"), ratio(med(v), med(h)),
                         f"{s['load_before']} -> {s['load_after']}"])
        out.append("### Fashion-MNIST CNN to 85% test accuracy, PyTorch (seconds)\n\n" + rows_table(
            ["ranks", "hora (median)", "hora runs", "Horovod (median)", "Horovod runs", "Horovod / hora (speed-up)",
             "load before -> after"], rows))
    if "keras" in results:
        rows = []
        for s in results["keras"]:
            h = [r["images_per_sec"] for r in s["runs"]["hora"]]
            v = [r["images_per_sec"] for r in s["runs"]["Horovod"]]
            rows.append([s["model"], s["np"], fmt(med(h)), " / ".join(fmt(x) for x in h), fmt(med(v)),
                         " / ".join(fmt(x) for x in v), ratio(med(h), med(v)), f"{s['load_before']} -> {s['load_after']}"])
        out.append("### Keras model.fit, horovod.tensorflow.keras (images/s)\n\n" + rows_table(
            ["model", "ranks", "hora (median)", "hora runs", "Horovod (median)", "Horovod runs", "hora / Horovod",
             "load before -> after"], rows))
    if "tutorial" in results:
        rows = []
        for s in results["tutorial"]:
            h = [r["time_to_target_s"] for r in s["runs"]["hora"]]
            v = [r["time_to_target_s"] for r in s["runs"]["Horovod"]]
            rows.append([s["np"], fmt(med(h)), " / ".join(fmt(x) for x in h), fmt(med(v)), " / ".join(fmt(x) for x in v),
                         ratio(med(v), med(h)), f"{s['load_before']} -> {s['load_after']}"])
        out.append("### The tutorial's Keras script to 85% validation accuracy (seconds)\n\n" + rows_table(
            ["ranks", "hora (median)", "hora runs", "Horovod (median)", "Horovod runs", "Horovod / hora (speed-up)",
             "load before -> after"], rows))
    if "allreduce" in results:
        rows = []
        for s in results["allreduce"]:
            def col(fw, key):
                return [r.get("latency_4B_us") if key == "lat" else (r.get("busbw_GBps") or {}).get(key)
                        for r in s["runs"][fw]]
            for key, label, digits in (("lat", "4 B latency (us)", 1), ("1MiB", "1 MiB busbw (GB/s)", 3),
                                       ("16MiB", "16 MiB busbw (GB/s)", 3), ("64MiB", "64 MiB busbw (GB/s)", 3)):
                h, v = col("hora", key), col("Horovod", key)
                rows.append([s["np"], label, fmt(med(h), digits), " / ".join(fmt(x, digits) for x in h),
                             fmt(med(v), digits), " / ".join(fmt(x, digits) for x in v),
                             ratio(med(h), med(v)), f"{s['load_before']} -> {s['load_after']}"])
        out.append("### hvd.allreduce, float32 sum\n\n" + rows_table(
            ["ranks", "what", "hora (median)", "hora runs", "Horovod (median)", "Horovod runs",
             "hora / Horovod", "load before -> after"], rows))
    if "elastic" in results:
        rows = []
        for s in results["elastic"]:
            h = [r.get("recovery_s") for r in s["runs"]["hora"]]
            v = [r.get("recovery_s") for r in s["runs"]["Horovod"]]
            rows.append([fmt(med(h), 2), " / ".join(fmt(x, 2) for x in h), fmt(med(v), 2),
                         " / ".join(fmt(x, 2) for x in v), ratio(med(h), med(v)),
                         f"{s['load_before']} -> {s['load_after']}"])
        out.append("### Elastic: SIGKILL of rank 1 of 2 to the first step at size 1 (s)\n\n" + rows_table(
            ["hora (median)", "hora runs", "Horovod (median)", "Horovod runs", "hora / Horovod",
             "load before -> after"], rows))
    if "failures" in results:
        rows = []
        for s in results["failures"]:
            for fw in ("hora", "Horovod"):
                ends = ["still running at %d s" % s.get("cap", 120) if r["ended_s"] is None else fmt(r["ended_s"], 2)
                        for r in s["runs"][fw]]
                rows.append([s["mode"], fw, " / ".join(ends), " / ".join(str(r["code"]) for r in s["runs"][fw])])
        out.append("### Failures, 2 ranks: seconds from the event until every process has ended\n\n" + rows_table(
            ["event", "framework", "runs (s)", "launcher exit codes"], rows))
        for s in results["failures"]:
            for fw in ("hora", "Horovod"):
                out.append(f"{s['mode']}, {fw}, after the event (round 0): " + gist(s["runs"][fw][0]["first_lines"]))
    return "\n\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sets = ["synthetic", "cnn", "wrn", "tta", "keras", "tutorial", "allreduce", "elastic", "failures"]
    p.add_argument("--sets", nargs="+", default=sets, choices=sets)
    p.add_argument("--keras", nargs="+", default=["cnn", "wrn"], choices=sorted(KERAS_STEPS),
                   help="models of the keras set (wrn: the tutorial's WRN-16-10)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--failure-repeat", type=int, default=1)
    p.add_argument("--failure-modes", nargs="+", default=["kill", "stop", "mismatch"],
                   choices=["kill", "stop", "mismatch"], help="failures: which events to run")
    p.add_argument("--np", type=int, nargs="+", default=[2, 4])
    p.add_argument("--synthetic", nargs="+", default=["resnet18", "resnet50"],
                   help="models of the synthetic benchmark, each MODEL (every --np) or MODEL:NP")
    p.add_argument("--batch", type=int, default=None, help="per-rank batch (default: resnet18 16, resnet50 8)")
    p.add_argument("--batches-per-iter", type=int, default=5)
    p.add_argument("--horovod-dir", default=os.path.expanduser("~/.cache/hora-bench"))
    p.add_argument("--timeout", type=int, default=600, help="seconds per launch")
    p.add_argument("--cap", type=int, default=120, help="failure runs: seconds before giving up")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--table", help="print the tables of this JSON file and exit")
    args = p.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table(json.load(f)["results"]))
        return
    args.batch = args.batch or {"resnet18": 16, "resnet50": 8}
    fws = frameworks(args)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hora-hvd-") as work:
        for name in args.sets:
            print(f"<!-- set {name}, load {load()} -->", flush=True)
            if name == "synthetic":
                results[name] = set_synthetic(args, fws, work)
            elif name in ("cnn", "tta"):
                results[name] = set_workload(args, fws, name)
            elif name == "wrn":
                results[name] = set_workload(args, fws, name, ["--steps", "8", "--warmup", "2"])
            elif name == "keras":
                results[name] = set_keras(args, fws)
            elif name == "tutorial":
                results[name] = set_tutorial(args, fws, work)
            elif name == "allreduce":
                results[name] = set_workload(args, fws, "allreduce")
            elif name == "elastic":
                results[name] = set_elastic(args, fws, work)
            else:
                results[name] = set_failures(args, fws, work)
                for s in results[name]:
                    s["cap"] = args.cap
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"argv": sys.argv[1:], "results": results}, f, indent=1)
    print(table(results))
    print(f"\nProduced by `benchmarks/horovod/side_by_side.py {' '.join(sys.argv[1:])}`.")


if __name__ == "__main__":
    main()
