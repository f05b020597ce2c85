#!/usr/bin/env python3
"""A torch CNN under plain mpirun (which sets no OMP_NUM_THREADS), with the OpenBLAS pool that
hvd.init() gives each rank (its share of the host's cores, Note [thread budget]) against the pool
OpenBLAS starts by itself (a thread per core: what every rank had before, set here with
OPENBLAS_NUM_THREADS = the cores). Both run the same script, which calls torch.set_num_threads(1)
as Horovod's examples do; configurations interleaved, every run printed.

usage: .venv/bin/python benchmarks/training/openblas_share_bench.py [--np 2 4] [--repeat 3]
           [--steps 150] [--mpirun mpirun.mpich]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

RESULT = re.compile(r"RESULT images_per_s=(\S+)")


def worker(steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import hora.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    images, labels = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    for _ in range(10):
        step()
    start = time.monotonic()
    for _ in range(steps):
        step()
    if hvd.rank() == 0:
        print(f"RESULT images_per_s={steps * 64 * hvd.size() / (time.monotonic() - start):.1f}", flush=True)


def run(args, n, config):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "OMP_", "OPENBLAS_", "GOTO_"))}
    if config == "own pool":
        env["OPENBLAS_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    done = subprocess.run([args.mpirun, "-np", str(n), sys.executable, os.path.abspath(__file__), "--worker",
                           "--steps", str(args.steps)], capture_output=True, text=True, env=env, timeout=600)
    found = RESULT.findall(done.stdout)
    if done.returncode or not found:
        raise RuntimeError(f"np={n} {config} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(found[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--np", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--mpirun", default="mpirun.mpich")
    args = parser.parse_args()
    if args.worker:
        return worker(args.steps)
    configs = ("init's share", "own pool")
    runs = {}
    for repeat in range(args.repeat):
        for n in args.np:
            for config in configs:
                runs.setdefault((n, config), []).append(run(args, n, config))
                print(f"# repeat {repeat + 1}: np={n} {config}: {runs[n, config][-1]:.1f} images/s "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)
    print("| ranks | init's share (images/s) | own pool (images/s) | share / own, per repeat |")
    print("| --- | --- | --- | --- |")
    for n in args.np:
        share, own = runs[n, configs[0]], runs[n, configs[1]]
        ratios = " / ".join(f"{a / b:.2f}" for a, b in zip(share, own))
        print(f"| {n} | {statistics.median(share):.1f} ({' / '.join(f'{v:.1f}' for v in share)}) | "
              f"{statistics.median(own):.1f} ({' / '.join(f'{v:.1f}' for v in own)}) | {ratios} |")


if __name__ == "__main__":
    main()
