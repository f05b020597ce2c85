#!/usr/bin/env python3
"""How fast a job starts: from launching `horarun -np N hora-noop` (or `mpirun -np N hora-noop`,
the same no-op started by OpenMPI's or MPICH's mpirun, whose ranks then find rank 0 through the
launcher's key-value service as any mpirun-started hora job does) to every rank initialized
(connected to all peers), and to the launcher's exit. Also `mpirun -np N true`, the launcher's
own floor. The launchers take turns (A B C A B C ...), so that machine noise hits each alike;
every run is printed, then the median and best of each, and horarun's median over OpenMPI's.

usage: launch_bench.py --bin build/release [--np 2 4 8] [--repeat 7] [--prefix CMD] [--hosts H]
"""

import argparse
import os
import shutil
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
    ap.add_argument("--hosts", default="", help="-H for every launcher, e.g. 10.0.0.1:2,10.0.0.2:2")
    ap.add_argument("--mpirun-extra", default="", help="extra flags for OpenMPI's mpirun (ssh key, interfaces)")
    ap.add_argument("--mpich-extra", default=None, help="extra flags for MPICH's mpirun; unset: MPICH is left out")
    ap.add_argument("--horarun-extra", default="", help="extra horarun flags (ssh key)")
    ap.add_argument("--baseline-horarun", default="", help="another horarun binary to compare (e.g. an older build)")
    args = ap.parse_args()
    horarun = os.path.join(args.bin, "launcher", "horarun")
    noop = os.path.join(args.bin, "benchmarks", "hora-noop")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", HORA_LOG_LEVEL="error")
    prefix = args.prefix.split()
    hosts = ["-H", args.hosts] if args.hosts else []
    rows, every = [], []
    for n in args.np:
        runs = {
            "horarun": prefix + [horarun, "-np", str(n)] + hosts + args.horarun_extra.split() + [noop],
            "mpirun (OpenMPI)": prefix + ["mpirun.openmpi", "-np", str(n)] + hosts + args.mpirun_extra.split() + [noop],
            "mpirun (OpenMPI), `true`": prefix + ["mpirun.openmpi", "-np", str(n)] + hosts + args.mpirun_extra.split() + ["true"],
        }
        if args.baseline_horarun:
            runs["horarun (baseline)"] = prefix + [args.baseline_horarun, "-np", str(n)] + hosts + args.horarun_extra.split() + [noop]
        if args.mpich_extra is not None and shutil.which("mpirun.mpich"):
            mpich_hosts = ["-hosts", args.hosts] if args.hosts else []
            runs["mpirun (MPICH)"] = prefix + ["mpirun.mpich", "-np", str(n)] + mpich_hosts + args.mpich_extra.split() + [noop]
        results = {name: [] for name in runs}
        for _ in range(args.repeat):  # interleaved
            for name, command in runs.items():
                results[name].append(timed(command, env))
        medians = {}
        for name, samples in results.items():
            inits = [i for i, _ in samples if i is not None]
            exits = [e for _, e in samples]
            medians[name] = statistics.median(inits) if inits else None
            init_text = f"{statistics.median(inits):.0f} | {min(inits):.0f}" if inits else "- | -"
            rows.append(f"| {name} | {n} | {init_text} | {statistics.median(exits):.0f} | {min(exits):.0f} |")
            every.append(f"| {name} | {n} | " + ", ".join("-" if i is None else f"{i:.0f}" for i, _ in samples) +
                         " | " + ", ".join(f"{e:.0f}" for _, e in samples) + " |")
        if medians.get("horarun") and medians.get("mpirun (OpenMPI)"):
            rows.append(f"| horarun / mpirun (OpenMPI), to all initialized | {n} | "
                        f"{medians['horarun'] / medians['mpirun (OpenMPI)']:.2f}x | | | |")
    print("| launcher | np | to all initialized, median (ms) | best | to exit, median (ms) | best |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))
    print("\nEvery run, in the order they ran (interleaved):\n")
    print("| launcher | np | to all initialized (ms) | to exit (ms) |")
    print("| --- | --- | --- | --- |")
    print("\n".join(every))


if __name__ == "__main__":
    main()
