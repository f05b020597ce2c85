#!/usr/bin/env bash
# usage: cpp_example_test.sh HORARUN FASHION_MNIST: the C++ example, reduced to fit CI (as
# tests/python/test_example.py does for the Python one): 2 workers train the small CNN without
# augmentation to 85% test accuracy, write a checkpoint and a timeline, then resume from the
# checkpoint for one more epoch.
set -euo pipefail
horarun=$1 example=$2
data=/usr/share/datasets/fashion-mnist
if [ ! -d "$data" ]; then echo "SKIP: dataset-fashion-mnist is not installed"; exit 77; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

common=(--model cnn --batch-size 64 --no-augment --checkpoint "$work/ck.pt")
"$horarun" -np 2 "$example" "${common[@]}" --epochs 3 --patience 1 --timeline "$work/timeline.json" >"$work/first.log" 2>&1 ||
  { tail -20 "$work/first.log"; fail "training exited with $?"; }
grep -E "^\[0\]<stdout>:(epoch|RESULT)" "$work/first.log"
result=$(grep -oE "RESULT accuracy=[0-9.]+ target=0.85 reached=yes" "$work/first.log") || fail "85% not reached"
accuracy=${result#RESULT accuracy=}; accuracy=${accuracy%% *}
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.85) }' || fail "accuracy $accuracy"
[ -s "$work/ck.pt" ] || fail "no checkpoint"
grep -q '"name":"ALLREDUCE"' "$work/timeline.json" || fail "the timeline has no ALLREDUCE"
done_epochs=$(grep -cE "^\[0\]<stdout>:epoch [0-9]+:" "$work/first.log")

"$horarun" -np 2 "$example" "${common[@]}" --train-limit 6400 --epochs $((done_epochs + 1)) --patience 5 --resume \
  >"$work/resumed.log" 2>&1 || { tail -20 "$work/resumed.log"; fail "resumed training exited with $?"; }
grep -q "resumed from $work/ck.pt after epoch $done_epochs" "$work/resumed.log" || fail "did not resume"
grep -qE "^\[0\]<stdout>:epoch $((done_epochs + 1)):" "$work/resumed.log" || fail "no epoch $((done_epochs + 1))"
! grep -qE "^\[0\]<stdout>:epoch 1:" "$work/resumed.log" || fail "started again from epoch 1"
echo "PASS: the C++ example reached $accuracy and resumed after epoch $done_epochs"
