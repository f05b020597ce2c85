#!/usr/bin/env python3
"""Allreduce comparison in one invocation: hora (shared memory and TCP) vs OpenMPI (shared memory
and TCP) vs MPICH (its default, shared memory) vs torch.distributed with gloo, float32 sum, for each world size, each run `--repeat` times.

    .venv/bin/python benchmarks/compare/compare.py --np 2 4 --out docs/benchmarks

Writes compare.md (median busbw of the in-place rows, best in brackets, and the 4-byte latency)
and compare.png (busbw against size), plus the raw JSON of every run. All systems run in the
same invocation, interleaved per repetition, so machine noise hits them alike.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def run(cmd, env=None, timeout=900):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(cmd, env=e, timeout=timeout, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def systems(build, args, np, tmp):
    sizes = ["-b", args.b, "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w", str(args.w)]
    horarun = str(build / "launcher" / "horarun")
    mpi_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    mpirun = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none"]
    mpi_bench = build / "benchmarks" / "mpi-allreduce-bench"
    hora_bench = [horarun, "-np", str(np), str(build / "benchmarks" / "hora-bench"), "allreduce", *sizes, "-c", "1"]
    out = {
        "hora shm": lambda f: run([*hora_bench, "--json", f], {"HORA_TRANSPORT": "shm"}),
        "hora TCP": lambda f: run([*hora_bench, "--json", f], {"HORA_TRANSPORT": "tcp"}),
    }
    if mpi_bench.exists():
        out["OpenMPI shm"] = lambda f: run([*mpirun, str(mpi_bench), *sizes, "--json", f], mpi_env)
        out["OpenMPI TCP"] = lambda f: run([*mpirun, "--mca", "btl", "tcp,self", str(mpi_bench), *sizes,
                                            "--json", f], mpi_env)
    mpich_bench = mpichBench(build)
    if mpich_bench:
        out["MPICH"] = lambda f: run(["mpirun.mpich", "-np", str(np), str(mpich_bench), *sizes, "--json", f])
    port = str(29500 + np)
    out["torch gloo"] = lambda f: run([horarun, "-np", str(np), "-x", "MASTER_ADDR=127.0.0.1", "-x",
                                       f"MASTER_PORT={port}", "/usr/bin/python3",
                                       str(HERE / "gloo_allreduce_bench.py"), *sizes, "--json", f])
    return out


def mpichBench(build):
    """The MPI benchmark compiled against MPICH (CMake builds it against the default MPI, OpenMPI)."""
    compiler = "/usr/bin/mpicxx.mpich"
    if not os.path.exists(compiler) or not os.path.exists("/usr/bin/mpirun.mpich"):
        return None
    target = build / "benchmarks" / "mpich-allreduce-bench"
    source = HERE / "mpi_allreduce_bench.cc"
    if not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
        run([compiler, "-O2", "-std=c++17", "-DMPICH_SKIP_MPICXX=1", "-DOMPI_SKIP_MPICXX=1", str(source), "-o", str(target)])
    return target


def busbw_by_size(doc):
    return {row["size"]: row["in_place"]["busbw"] for row in doc["rows"]}


def latency(doc):
    return doc["rows"][0]["in_place"]["time_us"]


def human(size):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div:
            return f"{size / div:g} {unit}"
    return f"{size} B"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, nargs="+", default=[2, 4])
    p.add_argument("--build", default=str(ROOT / "build" / "release"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("-b", default="4")
    p.add_argument("-e", default="64M")
    p.add_argument("-f", type=float, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    args = p.parse_args()
    build, out = pathlib.Path(args.build), pathlib.Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)

    results = {}  # (np, system) -> list of JSON docs
    for np in args.np:
        for rep in range(args.repeat):
            for name, bench in systems(build, args, np, out).items():
                f = out / "raw" / f"np{np}-{name.replace(' ', '_').replace('(', '').replace(')', '')}-{rep}.json"
                print(f"np={np} run {rep + 1}/{args.repeat}: {name}", file=sys.stderr, flush=True)
                bench(str(f))
                results.setdefault((np, name), []).append(json.loads(f.read_text()))

    lines = [f"Allreduce, float32 sum, in place; busbw in GB/s (GB = 1e9), median of {args.repeat} runs "
             f"[best]; latency = time of the smallest size in us, median [best].", ""]
    for np in args.np:
        names = [n for (k, n) in results if k == np]
        docs = {n: results[(np, n)] for n in names}
        sizes = sorted(busbw_by_size(docs[names[0]][0]))
        lines += [f"### np={np}", "", "| size | " + " | ".join(names) +
                  " | hora shm / best same-host other | hora TCP / OpenMPI TCP |",
                  "| --- |" + " --- |" * (len(names) + 2)]

        def med_best(name, size):
            vals = [busbw_by_size(d)[size] for d in docs[name]]
            return statistics.median(vals), max(vals)

        def ratio(mine, others, size):
            theirs = [med_best(o, size)[0] for o in others if o in docs]
            if mine not in docs or not theirs or max(theirs) <= 0:
                return "-"
            return f"{med_best(mine, size)[0] / max(theirs):.2f}"

        for size in sizes:
            cells = []
            for n in names:
                m, b = med_best(n, size)
                cells.append(f"{m:.3f} [{b:.3f}]")
            lines.append(f"| {human(size)} | " + " | ".join(cells) +
                         f" | {ratio('hora shm', ['OpenMPI shm', 'MPICH', 'torch gloo'], size)}"
                         f" | {ratio('hora TCP', ['OpenMPI TCP'], size)} |")
        lat = []
        for n in names:
            vals = [latency(d) for d in docs[n]]
            lat.append(f"{statistics.median(vals):.1f} [{min(vals):.1f}]")
        lines += [f"| latency ({human(sizes[0])}, us) | " + " | ".join(lat) + " | | |", ""]
    cmd = "benchmarks/compare/compare.py " + " ".join(sys.argv[1:])
    lines += [f"Produced by `{cmd}`."]
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(args.np), figsize=(6 * len(args.np), 4.5), squeeze=False)
    for ax, np in zip(axes[0], args.np):
        for (k, name), docs in results.items():
            if k != np:
                continue
            sizes = sorted(busbw_by_size(docs[0]))
            ax.plot(sizes, [statistics.median(busbw_by_size(d)[s] for d in docs) for s in sizes],
                    marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"allreduce float32, np={np}")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "compare.png", dpi=110)


if __name__ == "__main__":
    main()
