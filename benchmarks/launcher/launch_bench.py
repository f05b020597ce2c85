#!/usr/bin/env python3
"""How fast a job starts: from launching `horarun -np N hora-noop` (or `mpirun -np N hora-noop`,
the same no-op started by OpenMPI, whose ranks then find each other as any mpirun-started hora
job does) to every rank initialized (connected to all peers), and to the launcher's exit. Also
`mpirun -np N true`, the launcher's own floor. Median and best of --repeat runs, as a markdown
table.

usage: launch_bench.py --bin build/release [--np 2 4 8] [--repeat 7] [--hosts-prefix CMD]
"""

import argparse
import os
import statistics
import subprocess
import time


def timed(command, env):
    start = time.time_ns()
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    end = time.time_ns()
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    init = None
    for line in out.stdout.splitlines():
        if "initialized_at_ns" in line:
            init = int(line.split()[-1])
    return ((init - start) / 1e6 if init else None), (end - start) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="build directory with launcher/horarun and benchmarks/hora-noop")
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--prefix", default="", help="command prefix, e.g. 'ip netns exec h1'")
    ap.add_argument("--hosts", default="", help="-H for both launchers, e.g. 10.0.0.1:2,10.0.0.2:2")
    ap.add_argument("--mpirun-extra", default="", help="extra mpirun flags (ssh key, interfaces)")
    ap.add_argument("--horarun-extra", default="", help="extra horarun flags (ssh key)")
    args = ap.parse_args()
    horarun = os.path.join(args.bin, "launcher", "horarun")
    noop = os.path.join(args.bin, "benchmarks", "hora-noop")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", HORA_LOG_LEVEL="error")
    prefix = args.prefix.split()
    hosts = ["-H", args.hosts] if args.hosts else []
    print("| launcher | np | to all initialized, median (ms) | best | to exit, median (ms) | best |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in args.np:
        runs = {
            "horarun": prefix + [horarun, "-np", str(n)] + hosts + args.horarun_extra.split() + [noop],
            "mpirun (OpenMPI)": prefix + ["mpirun.openmpi", "-np", str(n)] + hosts + args.mpirun_extra.split() + [noop],
            "mpirun (OpenMPI), `true`": prefix + ["mpirun.openmpi", "-np", str(n)] + hosts + args.mpirun_extra.split() + ["true"],
        }
        results = {name: [] for name in runs}
        for _ in range(args.repeat):  # interleaved, so that machine noise hits every launcher alike
            for name, command in runs.items():
                results[name].append(timed(command, env))
        for name, samples in results.items():
            inits = [i for i, _ in samples if i is not None]
            exits = [e for _, e in samples]
            init_text = f"{statistics.median(inits):.0f} | {min(inits):.0f}" if inits else "- | -"
            print(f"| {name} | {n} | {init_text} | {statistics.median(exits):.0f} | {min(exits):.0f} |")


if __name__ == "__main__":
    main()
