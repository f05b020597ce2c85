#!/usr/bin/env python3
"""The C++ example (examples/cpp/fashion_mnist) against the Python one
(examples/pytorch/fashion_mnist.py): images/sec of the same model, per-worker batch, ranks and
data, alternating the two programs --repeat times in one run so the machine's noise hits both.

Each run trains --epochs epochs on the first --train-limit images; the throughput is that of the
last epoch (the first pays for start-up). Prints a markdown table of medians.

usage: benchmarks/training/cpp_vs_python.py [--build build/release] [--np 2] [--repeat 3]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = [  # (label, example flags)
    ("WRN-16-1, batch 32, augmented", ["--model", "wrn", "--width", "1", "--batch-size", "32"]),
    ("CNN, batch 64, no augmentation", ["--model", "cnn", "--batch-size", "64", "--no-augment"]),
]


def images_per_sec(command):
    out = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(command)}\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    rates = re.findall(r"\[0\]<stdout>:epoch \d+: .* \| ([0-9.]+) images/sec", out.stdout)
    if not rates:
        sys.exit(f"no throughput in the output of {' '.join(command)}:\n{out.stdout[-2000:]}")
    return float(rates[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-limit", type=int, default=8000)
    args = p.parse_args()

    horarun = os.path.join(args.build, "launcher", "horarun")
    cpp = os.path.join(args.build, "examples", "cpp", "fashion_mnist")
    python = os.path.join(ROOT, ".venv", "bin", "python")
    common = ["--epochs", str(args.epochs), "--train-limit", str(args.train_limit), "--target-accuracy", "1.0"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = ["--checkpoint", os.path.join(tmp, "ck.pt")]
        for label, flags in CONFIGS:
            runs = {"C++": [], "Python": []}
            for _ in range(args.repeat):
                runs["C++"].append(images_per_sec([horarun, "-np", str(args.np), cpp, *flags, *common, *checkpoint]))
                runs["Python"].append(images_per_sec([horarun, "-np", str(args.np), python,
                                                      os.path.join(ROOT, "examples", "pytorch", "fashion_mnist.py"),
                                                      "--no-progress", *flags, *common, *checkpoint]))
            cpp_rate, py_rate = statistics.median(runs["C++"]), statistics.median(runs["Python"])
            rows.append((label, cpp_rate, py_rate, runs))
            print(f"{label}: C++ {runs['C++']}, Python {runs['Python']}", file=sys.stderr, flush=True)

    print(f"{args.np} workers x 1 thread, last of {args.epochs} epochs on {args.train_limit} images, "
          f"median of {args.repeat} alternating runs (images/sec)\n")
    print("| model | C++ (hora::torch) | Python (hora.torch) | C++ / Python |")
    print("|---|---:|---:|---:|")
    for label, cpp_rate, py_rate, _ in rows:
        print(f"| {label} | {cpp_rate:.1f} | {py_rate:.1f} | {cpp_rate / py_rate:.3f} |")


if __name__ == "__main__":
    main()
