#!/usr/bin/env bash
# The main job: the Horovod tutorial's Fashion-MNIST training (WideResNet) on 2 workers with
# hora.torch, until the validation accuracy stays above 85% for 2 epochs. Extra arguments go to
# the example (e.g. --width 10 for the tutorial's WRN-16-10, --epochs 3).
#   scripts/demo.sh --keras   the same job as the tutorial wrote it: its Keras script with
#                             hora.tensorflow.keras (examples/keras/fashion_mnist.py, Keras 2)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh
source .venv/bin/activate
if [ "${1:-}" = --keras ]; then
  shift
  out=runs/demo-keras
  mkdir -p "$out"
  log="$out/train.log"
  horarun -np 2 --timeline-filename "$out/timeline.json" python examples/keras/fashion_mnist.py \
    --checkpoint "$out/fashion_mnist.keras" "$@" 2>&1 | tee "$log"
else
  out=runs/demo
  mkdir -p "$out"
  log="$out/train.log"
  horarun -np 2 python examples/pytorch/fashion_mnist.py --checkpoint "$out/fashion_mnist.pt" \
    --timeline "$out/timeline.json" "$@" 2>&1 | tee "$log"
fi
result=$(grep -o 'RESULT .*' "$log" | tail -1)
[ -n "$result" ] || { echo "demo: the training did not report a result; see $log"; exit 1; }
field() { echo "$result" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
echo
echo "accuracy reached:   $(field accuracy) (target $(field target): $(field reached))"
echo "time to the target: $(field time_to_target_s) s of training (all epochs: $(field train_time_s) s)"
echo "checkpoint:         $(field checkpoint)"
echo "timeline:           $out/timeline.json (open in chrome://tracing or ui.perfetto.dev)"
[ "$(field reached)" = yes ]
