#!/usr/bin/env bash
# Training across 2 hosts x 1 rank whose links are capped by tbf: hora vs PyTorch DDP (gloo),
# each without and with fp16 gradient compression, WRN-16-10 (global batch 32) and the CNN of
# examples/pytorch/fashion_mnist.py (global batch 128); every configuration interleaved, for each
# link rate. Hosts are network namespaces on a bridge with their own sshd and hostname
# (tests/integration/netns_hosts.sh); the cap is set on both ends of each host's link (egress
# inside the host, and on the bridge's side), as in allreduce_tbf.sh. The runs themselves are
# train_tbf.py's. Prints a markdown table: images/s, median and every run, hora / DDP.
#
# usage: benchmarks/multihost/train_tbf.sh [--repeat N] [--rate R]... [--models "wrn cnn"]
#            [--steps N] [--warmup N] [--json FILE] [--python PY]                     (as root)
#   --rate: tc rate, repeatable (default: 10gbit and 1gbit); --steps/--warmup: timed and
#   warm-up steps of every model (default: CNN 60 after 10, WRN 6 after 2); --python: the
#   python with hora installed and horarun beside it (default: .venv/bin/python, from
#   scripts/setup.sh). Namespaces, bridge, sshd and the ranks are removed on exit, Ctrl-C or
#   failure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
invocation=$(printf ' %q' "$@")
repeat=3 rates=() json="" python=${PYTHON:-$root/.venv/bin/python} extra=()
while (($#)); do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --rate) rates+=("$2"); shift 2 ;;
    --models) read -ra models <<<"$2"; extra+=(--models "${models[@]}"); shift 2 ;;
    --steps | --warmup) extra+=("$1" "$2"); shift 2 ;;
    --json) json=$(realpath "$2"); shift 2 ;;
    --python) python=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#rates[@]})) || rates=(10gbit 1gbit)
if ! [ -x "$(dirname "$python")/horarun" ] || ! "$python" -c "import hora.torch, torch.distributed"; then
  echo "$python: needs hora.torch and torch, and horarun beside it (scripts/setup.sh, or --python)" >&2
  exit 2
fi

. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77

# Python runs in the background so that a signal reaches this shell at once: the trap passes it
# on as SIGTERM, train_tbf.py stops its ranks (local, and remote through horarun), then the
# EXIT trap removes the hosts. (A background job of a script ignores SIGINT: Ctrl-C reaches the
# script, not python.)
pypid=
py() { "$python" "$@" & pypid=$!; wait "$pypid"; pypid=; }
on_signal() {
  [ -z "$pypid" ] || { kill -TERM "$pypid" 2>/dev/null; wait "$pypid" || true; }
  exit "$1"
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

hosts_up 2  # sets an EXIT trap of its own (hosts_down), replaced below
trap hosts_kill_and_down EXIT
work=$HOSTS_DIR/train; mkdir -p "$work"

for rate in "${rates[@]}"; do
  cap_links "$rate"
  py "$root/benchmarks/multihost/train_tbf.py" run --ns "${HOST_NS[1]}" "${HOST_NS[2]}" \
    --ips "${HOST_IP[1]}" "${HOST_IP[2]}" --ssh-key "$SSH_KEY" --rate "$rate" --repeat "$repeat" \
    --out "$work/$rate.json" "${extra[@]}"
done
files=(); for rate in "${rates[@]}"; do files+=("$work/$rate.json"); done
py "$root/benchmarks/multihost/train_tbf.py" table "${files[@]}" ${json:+--json "$json"}
echo
echo "Produced by \`benchmarks/multihost/train_tbf.sh$invocation\`."
