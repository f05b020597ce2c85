#!/usr/bin/env bash
# Allgather and broadcast across 2 hosts x 2 ranks whose links are capped by tbf: hora's
# hierarchical algorithms vs its flat ones (ring allgather; tree or chain broadcast) with shared
# memory inside hosts, vs the flat ones over TCP only; interleaved runs on the same namespace
# hosts (see allreduce_tbf.sh). Prints a markdown table: median time per call [best], microseconds
# for the small message, seconds for the large one.
# usage: benchmarks/multihost/gather_tbf.sh BUILD_DIR [REPEAT] [RATE]    (as root)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1"); repeat=${2:-3}; rate=${3:-1gbit}
. "$root/tests/integration/netns_hosts.sh"
hosts_available
hosts_up 2
work=$HOSTS_DIR/bench; mkdir -p "$work"
h1=${HOST_IP[1]} h2=${HOST_IP[2]}
cap_links "$rate"
declare -A variants=(
  [hier]="-x HORA_HIERARCHICAL_ALLGATHER=1 -x HORA_HIERARCHICAL_BROADCAST=1"
  [flat]="-x HORA_HIERARCHICAL_ALLGATHER=0 -x HORA_HIERARCHICAL_BROADCAST=0"
  [tcp]="-x HORA_HIERARCHICAL_ALLGATHER=0 -x HORA_HIERARCHICAL_BROADCAST=0 -x HORA_TRANSPORT=tcp"
)
run() {  # run OP SIZE ITERATIONS VARIANT JSON
  # shellcheck disable=SC2086
  on_host 1 "$build/launcher/horarun" -i "$SSH_KEY" -np 4 -H "$h1:2,$h2:2" ${variants[$4]} \
    "$build/benchmarks/hora-bench" "$1" -b "$2" -e "$2" -n "$3" -w 5 -c 0 --json "$5" >/dev/null
}
for r in $(seq 1 "$repeat"); do
  for op in allgather broadcast; do
    for v in hier flat tcp; do
      run "$op" 2K 300 "$v" "$work/$op-small-$v-$r.json"
      run "$op" 64M 3 "$v" "$work/$op-large-$v-$r.json"
    done
  done
done
python3 - "$work" "$repeat" "$rate" <<'PY'
import json, statistics, sys
work, repeat, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def cell(op, size, v, scale, fmt):
    t = [json.load(open(f"{work}/{op}-{size}-{v}-{r}.json"))["rows"][0]["in_place"]["time_us"] / scale
         for r in range(1, repeat + 1)]
    return f"{statistics.median(t):{fmt}} [{min(t):{fmt}}]"
print("| collective | hierarchical | flat, shared memory + TCP | flat, TCP only |")
print("| --- | --- | --- | --- |")
for op in ("allgather", "broadcast"):
    print(f"| {op} 2 KiB (us) | " + " | ".join(cell(op, "small", v, 1, ".1f") for v in ("hier", "flat", "tcp")) + " |")
    print(f"| {op} 64 MiB (s) | " + " | ".join(cell(op, "large", v, 1e6, ".3f") for v in ("hier", "flat", "tcp")) + " |")
PY
echo
echo "2 hosts x 2 ranks on $rate links, median of $repeat runs [best]; 2 KiB: 300 calls, 64 MiB: 3 calls (hora-bench sizes: the whole result)."
echo "Produced by \`benchmarks/multihost/gather_tbf.sh build/release $repeat $rate\`."
