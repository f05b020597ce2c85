#!/usr/bin/env bash
# Training across 2 hosts x 1 rank whose link is capped by tbf (where bandwidth is scarce: the
# case for overlap and fp16 compression): hora vs PyTorch DDP (gloo), each without and with fp16
# gradient compression (hora: Compression.fp16; DDP: its fp16_compress_hook), WRN-16-10 (global
# batch 32) and the CNN (global batch 128), every configuration interleaved, for each link rate.
# Hosts are network namespaces on a bridge (tests/integration/netns_hosts.sh); hora starts
# through horarun over ssh, DDP's ranks directly in their namespaces. Prints a markdown table of
# images/s (median, then every run).
# usage: benchmarks/multihost/train_tbf.sh [REPEAT] [RATES...]      (as root, after scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
repeat=${1:-3}; shift $(( $# >= 1 ? 1 : 0 ))
rates=("$@"); ((${#rates[@]})) || rates=(1gbit 10gbit)
python=$root/.venv/bin/python
bench=$root/benchmarks/training/train_bench.py
. "$root/tests/integration/netns_hosts.sh"
hosts_available
hosts_up 2
work=$HOSTS_DIR/train; mkdir -p "$work"
h1=${HOST_IP[1]} h2=${HOST_IP[2]}
cap() {  # cap RATE: both directions of both hosts' links
  local i
  for i in 1 2; do
    on_host "$i" tc qdisc replace dev eth0 root tbf rate "$1" burst 1mbit latency 50ms
    tc qdisc replace dev "hv${HOSTS_ID}h$i" root tbf rate "$1" burst 1mbit latency 50ms
  done
}
steps_of() { [ "$1" = cnn ] && echo "--steps 30 --warmup 5" || echo "--steps 4 --warmup 2"; }
hora() {  # hora MODEL FP16FLAG -> the RESULT line
  # shellcheck disable=SC2046
  on_host 1 "$root/.venv/bin/horarun" -i "$SSH_KEY" -np 2 -H "$h1:1,$h2:1" -x HORA_LOG_LEVEL=error \
    "$python" "$bench" --worker hora --model "$1" $(steps_of "$1") $2 | grep -m1 'RESULT '
}
ddp() {  # ddp MODEL FP16FLAG
  local port=$((20000 + RANDOM % 20000)) r out=$work/ddp.out
  : >"$out"
  for r in 0 1; do
    # shellcheck disable=SC2046
    MASTER_ADDR=$h1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 GLOO_SOCKET_IFNAME=eth0 \
      timeout 900 ip netns exec "${HOST_NS[$((r + 1))]}" "$python" "$bench" --worker ddp --model "$1" \
      $(steps_of "$1") $2 >>"$out" 2>&1 &
  done
  wait
  grep -m1 'RESULT ' "$out"
}
images() { sed 's/.*RESULT //' | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["images_per_sec"], 2))'; }
echo "| link | model | hora | DDP (gloo) | hora / DDP | hora fp16 | DDP fp16 hook | hora fp16 / DDP fp16 | runs (hora; DDP; hora fp16; DDP fp16) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for rate in "${rates[@]}"; do
  cap "$rate"
  for model in wrn cnn; do
    : >"$work/$rate-$model"
    for _ in $(seq 1 "$repeat"); do  # interleaved: the machine's drift hits every configuration alike
      echo "hora $(hora "$model" "" | images)" >>"$work/$rate-$model"
      echo "ddp $(ddp "$model" "" | images)" >>"$work/$rate-$model"
      echo "hora16 $(hora "$model" --fp16 | images)" >>"$work/$rate-$model"
      echo "ddp16 $(ddp "$model" --fp16 | images)" >>"$work/$rate-$model"
    done
    python3 - "$work/$rate-$model" "$rate" "$model" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    kind, value = line.split()
    runs[kind].append(float(value))
med = {k: statistics.median(v) for k, v in runs.items()}
label = {"wrn": "WRN-16-10 (batch 32)", "cnn": "CNN (batch 128)"}[sys.argv[3]]
every = "; ".join(", ".join(f"{x:g}" for x in runs[k]) for k in ("hora", "ddp", "hora16", "ddp16"))
print(f"| {sys.argv[2]} | {label} | {med['hora']:.2f} | {med['ddp']:.2f} | {med['hora'] / med['ddp']:.2f} | "
      f"{med['hora16']:.2f} | {med['ddp16']:.2f} | {med['hora16'] / med['ddp16']:.2f} | {every} |", flush=True)
PY
  done
done
echo
echo "2 hosts x 1 rank x 1 thread, images/s over the timed steps, median of $repeat interleaved runs."
echo "Produced by \`benchmarks/multihost/train_tbf.sh $repeat ${rates[*]}\`."
