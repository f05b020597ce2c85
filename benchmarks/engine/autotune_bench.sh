#!/usr/bin/env bash
# The autotuner against an exhaustive grid (autotune-bench), for both models at 2 and 4 ranks,
# repeated; every run's output goes to $out (default runs/autotune-bench.txt), with the load of
# the machine before each run. Not part of CI.
#
#   benchmarks/engine/autotune_bench.sh [repeats=3]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeats=${1:-3}
out=${out:-$root/runs/autotune-bench.txt}
mkdir -p "$(dirname "$out")"
horarun=$root/.venv/bin/horarun
bench=$root/build/release/benchmarks/autotune-bench
for r in $(seq "$repeats"); do
  for np in 2 4; do
    for model in resnet50 wrn16-10; do
      echo "## repeat $r, np $np, $model, $(uptime)" | tee -a "$out"
      "$horarun" -np "$np" -x HORA_STALL_SHUTDOWN_TIME_SECONDS=120 "$bench" --model "$model" 2>&1 | tee -a "$out"
    done
  done
done
