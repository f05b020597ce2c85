#!/usr/bin/env bash
# Allreduce across 2 hosts x 2 ranks whose links are capped by tbf: hora hierarchical vs hora's
# flat ring (shared memory inside hosts, TCP between: the default per-pair transport) vs the flat
# ring over TCP only vs OpenMPI, on the same namespace hosts, interleaved, for each link rate. Hosts are
# network namespaces on a bridge with their own sshd (tests/integration/netns_hosts.sh); the cap
# is set on both ends of each host's link (egress inside the host, and on the bridge's side).
# Prints a markdown table of median times (best in brackets) and the wire bound (docs/algorithms.md).
# usage: benchmarks/multihost/allreduce_tbf.sh BUILD_DIR [REPEAT] [RATES...]    (as root)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1"); repeat=${2:-3}; shift $(( $# >= 2 ? 2 : 1 ))
rates=("$@"); ((${#rates[@]})) || rates=(10gbit 1gbit)
. "$root/tests/integration/netns_hosts.sh"
hosts_available
hosts_up 2
work=$HOSTS_DIR/bench; mkdir -p "$work"
h1=${HOST_IP[1]} h2=${HOST_IP[2]}
size=64M
hora() {  # hora HIERARCHICAL TRANSPORT JSON
  on_host 1 "$build/launcher/horarun" -i "$SSH_KEY" -np 4 -H "$h1:2,$h2:2" -x HORA_HIERARCHICAL_ALLREDUCE="$1" \
    -x HORA_TRANSPORT="$2" "$build/benchmarks/hora-bench" allreduce -b "$size" -e "$size" -n 5 -w 1 -c 0 \
    --json "$3" >/dev/null
}
openmpi() {  # openmpi JSON
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 on_host 1 mpirun -np 4 -H "$h1:2,$h2:2" --bind-to none \
    --mca plm_rsh_args "-i $SSH_KEY" --mca btl_tcp_if_include "$HOSTS_SUBNET.0/24" \
    --mca oob_tcp_if_include "$HOSTS_SUBNET.0/24" \
    "$build/benchmarks/mpi-allreduce-bench" -b "$size" -e "$size" -n 5 -w 1 --json "$1" >/dev/null
}
echo "| link | hora hierarchical (s) | hora flat ring (s) | hora flat ring, TCP only (s) | OpenMPI (s) | wire bound (s) | hierarchical / bound | flat / hierarchical |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for rate in "${rates[@]}"; do
  cap_links "$rate"
  for r in $(seq 1 "$repeat"); do
    hora 1 auto "$work/$rate-hier-$r.json"
    hora 0 auto "$work/$rate-flat-$r.json"
    hora 0 tcp "$work/$rate-tcp-$r.json"
    openmpi "$work/$rate-ompi-$r.json"
  done
  python3 - "$work" "$rate" "$repeat" <<'PY'
import json, statistics, sys
work, rate, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
def times(kind):
    return [json.load(open(f"{work}/{rate}-{kind}-{r}.json"))["rows"][0]["in_place"]["time_us"] / 1e6
            for r in range(1, repeat + 1)]
bits = float(rate.replace("gbit", "e9").replace("mbit", "e6"))
size = 64 * 2**20
# Each host must send 2 (H-1)/H of the message across its link (H = 2 hosts): docs/algorithms.md.
bound = 2 * (2 - 1) / 2 * size * 8 / bits
h, f, t, o = times("hier"), times("flat"), times("tcp"), times("ompi")
cell = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}]"
print(f"| {rate} | {cell(h)} | {cell(f)} | {cell(t)} | {cell(o)} | {bound:.3f} | {statistics.median(h) / bound:.2f} | "
      f"{statistics.median(f) / statistics.median(h):.2f} |")
PY
done
echo
echo "2 hosts x 2 ranks, float32 sum allreduce of $size, 5 iterations after 1 warm-up, median of $repeat [best]."
echo "Produced by \`benchmarks/multihost/allreduce_tbf.sh build/release $repeat ${rates[*]}\`."
