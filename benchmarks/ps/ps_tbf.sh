#!/usr/bin/env bash
# Parameter servers against allreduce across namespace hosts whose links are capped by tbf
# (tests/integration/netns_hosts.sh; the cap on both ends of each host's link): one host per
# worker and one per server. The runs and the table are ps_tbf.py's.
#
# usage: benchmarks/ps/ps_tbf.sh [--rate R]... [ps_tbf.py run's options: --workers 2 4
#            --servers 1 2 --stragglers 0 0.5 --models cnn --repeat 3 --steps N --warmup N
#            --target 0.85 --eval-every 50 --give-up 600
#            --modes allreduce,ps-sync,ps-async,'staleness 2','ps-async m0.5']
#            --pin-cores] [--json FILE]                                           (as root)
#   --rate: tc rate, repeatable (default 1gbit). Namespaces, bridge, sshd and the ranks are
#   removed on exit, Ctrl-C or failure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
invocation=$(printf ' %q' "$@")
rates=() json="" python=${PYTHON:-$root/.venv/bin/python} extra=() workers=(2 4) servers=(1 2)
while (($#)); do
  case $1 in
    --rate) rates+=("$2"); shift 2 ;;
    --json) json=$(realpath "$2"); shift 2 ;;
    --workers) read -ra workers <<<"$2"; shift 2 ;;
    --servers) read -ra servers <<<"$2"; shift 2 ;;
    --stragglers | --models) read -ra values <<<"$2"; extra+=("$1" "${values[@]}"); shift 2 ;;
    --modes) IFS=, read -ra values <<<"$2"; extra+=("$1" "${values[@]}"); shift 2 ;;
    --pin-cores) extra+=("$1"); shift ;;
    --repeat | --steps | --warmup | --target | --eval-every | --give-up) extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#rates[@]})) || rates=(1gbit)
. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77
max() { printf '%s\n' "$@" | sort -n | tail -n 1; }
n=$(( $(max "${workers[@]}") + $(max "${servers[@]}") ))

pypid=
py() { "$python" "$@" & pypid=$!; wait "$pypid"; pypid=; }
on_signal() {
  [ -z "$pypid" ] || { kill -TERM "$pypid" 2>/dev/null; wait "$pypid" || true; }
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
hosts_up "$n"
trap hosts_kill_and_down EXIT
work=$HOSTS_DIR/ps; mkdir -p "$work"
for rate in "${rates[@]}"; do
  cap_links "$rate"
  py "$root/benchmarks/ps/ps_tbf.py" run --ns "${HOST_NS[@]:1:$n}" --ips "${HOST_IP[@]:1:$n}" \
    --ssh-key "$SSH_KEY" --rate "$rate" --out "$work/$rate.json" --workers "${workers[@]}" \
    --servers "${servers[@]}" "${extra[@]}"
done
files=(); for rate in "${rates[@]}"; do files+=("$work/$rate.json"); done
py "$root/benchmarks/ps/ps_tbf.py" table "${files[@]}" ${json:+--json "$json"}
echo
echo "Produced by \`benchmarks/ps/ps_tbf.sh$invocation\`."
