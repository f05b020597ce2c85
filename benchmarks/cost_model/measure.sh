#!/usr/bin/env bash
# Measurements for hora.cost_model (docs/parameter_servers.md, "Cost model"), across namespace
# hosts whose links are capped by tbf (tests/integration/netns_hosts.sh), written as records
# (records.py) into OUT, then fitted and compared by validate.py:
#   calibration: the reduce kernel (reduce-benchmark); an allreduce size sweep on one host (2 ranks,
#     shared memory) and across 2 hosts x 1 rank at every rate; ps-sync with 2 workers, 1 server.
#     --rate uncapped: only the sweep across 2 hosts, links not capped (TCP's CPU cost shows).
#     Default rates: 1gbit 10gbit uncapped.
#   validation: allreduce (hora's flat choice, and the hierarchy where hosts hold several ranks) on
#     2 x 2, 4 x 1, 4 x 2 and 8 x 1 hosts x ranks; ps-sync and ps-async with 2, 4, 8 workers (one per
#     host) and 1 or 2 servers (hosts of their own).
# Every configuration once per round, rounds repeated (--repeat), each rate in turn.
#
# usage: benchmarks/cost_model/measure.sh [--build DIR] [--rate R|uncapped]... [--repeat N] [--out DIR]
#            [--skip-one-host] [--only-ps-async]                                        (as root)
#   --skip-one-host: leave out the reduce kernel and the one-host sweep (measured before).
#   --only-ps-async: measure the ps-async rows alone (their records replace those in OUT).
#   --build: where hora-bench and reduce-benchmark are (default build/release); horarun and the
#   workers' python are $PYTHON's (default .venv/bin/python). --out default docs/benchmarks/raw/cost_model.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$root/benchmarks/cost_model
build=$root/build/release rates=() repeat=2 out=$root/docs/benchmarks/raw/cost_model one_host=1 others=1
python=${PYTHON:-$root/.venv/bin/python}
while (($#)); do
  case $1 in
    --build) build=$(realpath "$2"); shift 2 ;;
    --rate) rates+=("$2"); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-one-host) one_host=0; shift ;;
    --only-ps-async) one_host=0 others=0; shift ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#rates[@]})) || rates=(1gbit 10gbit uncapped)
mkdir -p "$out"; out=$(realpath "$out")
horarun=$(dirname "$python")/horarun
bench=$build/benchmarks/hora-bench
. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77
record() { "$python" "$here/records.py" "$@"; }

raw=$(mktemp)
((one_host == 0)) || "$build/benchmarks/reduce-benchmark" --benchmark_filter='Reduce/Float32Sum' --benchmark_format=json \
  --benchmark_repetitions=3 >"$raw" 2>/dev/null
((one_host == 0)) || record reduce "$raw" --role calibration --out "$out/reduce.json"
rm -f "$raw"

hosts_up 10  # 8 workers and 2 servers at most
trap hosts_kill_and_down EXIT
work=$HOSTS_DIR/cost; mkdir -p "$work"
hostlist() {  # hostlist FIRST COUNT PER_HOST: "ip:per,ip:per,..." of hosts FIRST .. FIRST+COUNT-1
  local i list=()
  for i in $(seq "$1" $(($1 + $2 - 1))); do list+=("${HOST_IP[$i]}:$3"); done
  (IFS=,; echo "${list[*]}")
}
gbit() { case $1 in *gbit) echo "${1%gbit}" ;; *mbit) echo "0${1%mbit}e-3" ;; esac; }  # (uncapped: none)
CORES=$(nproc)

# allreduce ROLE RATE RUN HOSTS PER_HOST HIERARCHICAL ALGORITHM MIN MAX FACTOR
allreduce() {
  local name="allreduce-$2-$4x$5-$7-run$3"
  on_host 1 "$horarun" -i "$SSH_KEY" -np $(($4 * $5)) -H "$(hostlist 1 "$4" "$5")" \
    -x HORA_HIERARCHICAL_ALLREDUCE="$6" -x HORA_LOG_LEVEL=error \
    "$bench" allreduce -b "$8" -e "$9" -f "${10}" -n 5 -w 1 -c 0 --json "$work/$name.raw.json" >/dev/null
  local link=(); [ "$2" = uncapped ] || link=(--link-gbit "$(gbit "$2")")
  record allreduce "$work/$name.raw.json" --role "$1" --run "$3" --hosts "$4" --ranks-per-host "$5" \
    "${link[@]}" --algorithm "$7" --cores "$CORES" --out "$out/$name.json"
}

# ps ROLE RATE RUN MODE WORKERS SERVERS SIZES...: one job per size, workers on hosts 1..W, servers after
ps() {
  local role=$1 rate=$2 run=$3 mode=$4 w=$5 k=$6; shift 6
  local name="$mode-$rate-${w}w${k}s-run$run" size prefixes=() iters=3 warmup=1
  # ps-async: spans of the slowest first exchange (ps_exchange.py): its workers take a few to drift apart
  [ "$mode" = ps-sync ] || iters=5 warmup=5
  for size in "$@"; do
    on_host 1 "$horarun" -i "$SSH_KEY" -np "$w" -H "$(hostlist 1 "$w" 1)" --server-hosts "$(hostlist $((w + 1)) "$k" 1)" \
      --start-timeout 300 -x HORA_LOG_LEVEL=error \
      "$python" "$here/ps_exchange.py" --bytes "$size" --mode "$mode" --iters "$iters" --warmup "$warmup" \
      --out "$work/$name-$size"
    prefixes+=("$work/$name-$size")
  done
  record ps "${prefixes[@]}" --role "$role" --run "$run" --mode "$mode" --hosts "$w" --servers "$k" \
    --link-gbit "$(gbit "$rate")" --cores "$CORES" --out "$out/$name.json"
}

M=$((1 << 20)) K=1024
for run in $(seq 1 $((one_host ? repeat : 0))); do  # one host, shared memory: no link involved
  name="allreduce-shm-1x2-auto-run$run"
  on_host 1 "$horarun" -np 2 -x HORA_LOG_LEVEL=error "$bench" allreduce -b 4K -e 64M -f 4 -n 5 -w 1 -c 0 \
    --json "$work/$name.raw.json" >/dev/null
  record allreduce "$work/$name.raw.json" --role calibration --run "$run" --hosts 1 --ranks-per-host 2 \
    --cores "$CORES" --out "$out/$name.json"
done
for rate in "${rates[@]}"; do
  [ "$rate" = uncapped ] || cap_links "$rate"
  for run in $(seq 1 "$repeat"); do
    echo "$(date +%T) $rate round $run/$repeat" >&2
    ((others == 0)) || allreduce calibration "$rate" "$run" 2 1 auto auto 4K 64M 4
    [ "$rate" != uncapped ] || continue
    ((others == 0)) || ps calibration "$rate" "$run" ps-sync 2 1 $((256 * K)) $((4 * M)) $((16 * M))
    for layout in "2 2" "4 1" "4 2" "8 1"; do
      ((others)) || continue
      read -r h l <<<"$layout"
      allreduce validation "$rate" "$run" "$h" "$l" 0 flat 256K 64M 4
      ((l == 1)) || allreduce validation "$rate" "$run" "$h" "$l" 1 hierarchical 256K 64M 4
    done
    for w in 2 4 8; do
      for k in 1 2; do
        ((others == 0 || (w == 2 && k == 1))) ||
          ps validation "$rate" "$run" ps-sync "$w" "$k" $((256 * K)) $((4 * M)) $((16 * M))
        ps validation "$rate" "$run" ps-async "$w" "$k" $((4 * M)) $((16 * M))
      done
    done
  done
done
"$python" "$here/validate.py" "$out" --params "$out/params.json"
