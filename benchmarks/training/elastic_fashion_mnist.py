#!/usr/bin/env python3
"""Elastic Fashion-MNIST under failures: examples/pytorch/fashion_mnist_elastic.py run undisturbed
and disturbed (two workers SIGKILLed, then a host added by the discovery script), same seed,
interleaved, on hosts 127.0.0.1-4 of this machine (each its own host to hora).

    python benchmarks/training/elastic_fashion_mnist.py --runs 1 --json results.json

Both runs start on 127.0.0.1:2, 127.0.0.2:1, 127.0.0.3:1 (4 workers). The disturbed one kills
127.0.0.2's worker (-> 3 workers), then 127.0.0.3's (-> 2), then adds 127.0.0.4:2 (-> 4), each
after the job has trained --gap batches since the last change, half a second after a commit, so
that the work since that commit is lost and redone. Reported per run: validation accuracy after
each epoch; for each reset, whether training resumed at the last commit logged before it (no
committed step lost); from each SIGKILL to the first step at the new size; for the added host,
from the first commit after its worker was ready (horarun's "hosts added") and from its
appearance in the discovery output to its first step in training."""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "pytorch", "fashion_mnist_elastic.py")
HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")
FIRST_HOSTS = "127.0.0.1:2\n127.0.0.2:1\n127.0.0.3:1\n"
ADDED_HOSTS = "127.0.0.1:2\n127.0.0.4:2\n"
# The disturbed run's changes, in order: (kind, worker id or discovery output, workers after it).
CHANGES = [("kill", "127.0.0.2:0", 3), ("kill", "127.0.0.3:0", 2), ("add", ADDED_HOSTS, 4)]

RANK0 = r"^\[0\]<stdout>:"
COMMIT = re.compile(RANK0 + r"commit: epoch (\d+) batch (\d+) \| (\d+) workers")
FIRST = re.compile(RANK0 + r"first step: epoch (\d+) batch (\d+) \| (\d+) workers")
RESET = re.compile(RANK0 + r"reset: (\d+) workers now, from the last commit: epoch (\d+) batch (\d+)")
EPOCH = re.compile(RANK0 + r"epoch (\d+): val_accuracy ([0-9.]+)")
RESULT = re.compile(RANK0 + r"RESULT accuracy=([0-9.]+)")
ADDED = re.compile(r"^horarun: hosts (added|mixed)")


def worker_pid(worker_id):
    """The pid of the process horarun started as `worker_id` (its HORA_ELASTIC_WORKER_ID)."""
    wanted = f"HORA_ELASTIC_WORKER_ID={worker_id}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    return int(pid)
        except OSError:
            pass
    raise RuntimeError(f"no process is worker {worker_id}")


class Run:
    def __init__(self, disturbed, args, workdir):
        self.disturbed = disturbed
        self.hosts = os.path.join(workdir, "hosts")
        with open(self.hosts, "w") as f:
            f.write(FIRST_HOSTS)
        command = [HORARUN, "-np", "4", "--min-np", "2", "--verbose", "--host-discovery-script", f"cat {self.hosts}",
                   sys.executable, EXAMPLE, "--log-progress", "--seed", str(args.seed), "--epochs", str(args.epochs),
                   "--no-augment", "--batch-size", str(args.batch_size), "--base-lr", str(args.base_lr),
                   "--train-limit", str(args.train_limit), "--decay-epochs", str(args.decay_epochs), "--commit-every", str(args.commit_every)]
        self.start = time.time()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []  # (time read, line)

    def lines_until(self, deadline):
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append((time.time(), line.rstrip("\n")))
            yield self.lines[-1]
            if time.time() > deadline:
                raise TimeoutError("".join(l + "\n" for _, l in self.lines[-40:]))

    def drive(self, gap, timeout):
        """Reads the output to its end; in a disturbed run, sets off the next change once `gap`
        batches were trained since the last one."""
        changes = list(CHANGES) if self.disturbed else []
        self.changes = []  # (kind, what, workers after it, time)
        since = None  # (epoch, batch) where the job stood after the last change
        for t, line in self.lines_until(time.time() + timeout):
            m = COMMIT.match(line) or FIRST.match(line)
            if not m or not changes:
                continue
            at = (int(m.group(1)), int(m.group(2)))
            if since is None or at[0] != since[0]:
                since = at
            if COMMIT.match(line) and at[1] - since[1] >= gap:
                time.sleep(0.5)  # between two commits: the work since this one is redone
                kind, what, workers_after = changes.pop(0)
                if kind == "kill":
                    os.kill(worker_pid(what), signal.SIGKILL)
                else:
                    with open(self.hosts, "w") as f:
                        f.write(what)
                self.changes.append((kind, what, workers_after, time.time()))
                since = (10**9, 0)  # the next first step starts the count again
        self.proc.wait(timeout=60)
        self.seconds = time.time() - self.start

    def report(self):
        text = [l for _, l in self.lines]
        out = {"disturbed": self.disturbed, "exit_code": self.proc.returncode, "seconds": round(self.seconds, 1),
               "epochs": [float(m.group(2)) for m in map(EPOCH.match, text) if m],
               "accuracy": next((float(m.group(1)) for m in map(RESULT.match, text) if m), None),
               "resets": [], "changes": []}
        last_commit = None
        for t, line in self.lines:
            if m := COMMIT.match(line):
                last_commit = (int(m.group(1)), int(m.group(2)))
            elif m := RESET.match(line):
                resumed = (int(m.group(2)), int(m.group(3)))
                out["resets"].append({"workers": int(m.group(1)), "resumed": resumed, "last_commit": last_commit,
                                      "no_commit_lost": resumed == last_commit})
        for kind, what, size, t in self.changes:
            first = next((ft for ft, l in self.lines if ft > t and (m := FIRST.match(l)) and int(m.group(3)) == size),
                         None)
            change = {"kind": kind, "what": what.strip().replace("\n", ","), "workers_after": size,
                      "to_first_step_s": round(first - t, 2) if first else None}
            if kind == "add" and first:
                ready = next((at for at, l in self.lines if at > t and ADDED.match(l)), None)
                commit = next((ct for ct, l in self.lines if ready and ct > ready and COMMIT.match(l)), None)
                change["worker_ready_after_s"] = round(ready - t, 2) if ready else None
                change["first_commit_after_ready_to_first_step_s"] = round(first - commit, 2) if commit else None
            out["changes"].append(change)
        out["log_tail"] = text[-12:]
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1, help="pairs of runs (undisturbed, disturbed), interleaved")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=30000)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--base-lr", type=float, default=0.02, help="per worker (the example scales it by the workers)")
    p.add_argument("--decay-epochs", type=int, default=1, help="the last N epochs at a tenth of the learning rate")
    p.add_argument("--commit-every", type=int, default=20)
    p.add_argument("--gap", type=int, default=60, help="batches trained between two changes")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=3600, help="per run")
    p.add_argument("--json")
    args = p.parse_args()

    results = []
    for i in range(args.runs):
        for disturbed in (False, True):
            with tempfile.TemporaryDirectory() as workdir:
                run = Run(disturbed, args, workdir)
                run.drive(args.gap, args.timeout)
                results.append(run.report())
            r = results[-1]
            print(f"run {i + 1} {'disturbed' if disturbed else 'undisturbed'}: exit {r['exit_code']}, "
                  f"{r['seconds']} s, accuracy by epoch {r['epochs']}", flush=True)
            for c in r["changes"]:
                print(f"  {c}", flush=True)
            for reset in r["resets"]:
                print(f"  reset to {reset['workers']} workers: resumed at {reset['resumed']}, last commit "
                      f"{reset['last_commit']}: {'no committed step lost' if reset['no_commit_lost'] else 'LOST'}",
                      flush=True)
    undisturbed = [r["accuracy"] for r in results if not r["disturbed"] and r["accuracy"] is not None]
    disturbed = [r["accuracy"] for r in results if r["disturbed"] and r["accuracy"] is not None]
    if undisturbed and disturbed:
        print(f"median final accuracy: undisturbed {statistics.median(undisturbed):.4f}, "
              f"disturbed {statistics.median(disturbed):.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": results}, f, indent=1)
    ok = all(r["exit_code"] == 0 and all(x["no_commit_lost"] for x in r["resets"]) for r in results)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
