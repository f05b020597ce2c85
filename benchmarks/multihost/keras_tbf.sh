#!/usr/bin/env bash
# Keras training across 2 hosts x 1 rank whose links are capped by tbf: hora.tensorflow.keras vs
# MultiWorkerMirroredStrategy vs the compute-only bound (benchmarks/tensorflow/keras_bench.py's
# configurations and workers), every configuration interleaved, for each link rate. Hosts are
# network namespaces on a bridge with their own sshd (tests/integration/netns_hosts.sh), capped on
# both ends of each link as in train_tbf.sh.
#
# usage: benchmarks/multihost/keras_tbf.sh [--rate R]... [keras_bench.py's options]   (as root)
#   --rate: tc rate, repeatable (default: 1gbit); other options (--models, --repeat, --steps,
#   --width, ...) go to keras_bench.py; PYTHON: the python with hora.tensorflow and horarun
#   beside it (default: .venv/bin/python). Namespaces, bridge and sshd are removed on exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
rates=() extra=()
while (($#)); do
  case $1 in
    --rate) rates+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
((${#rates[@]})) || rates=(1gbit)

. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77
hosts_up 2
trap hosts_kill_and_down EXIT

for rate in "${rates[@]}"; do
  cap_links "$rate"
  echo "## $rate"
  "$python" "$root/benchmarks/tensorflow/keras_bench.py" --python "$python" --ssh-key "$SSH_KEY" \
    --hosts "${HOST_NS[1]}:${HOST_IP[1]}" "${HOST_NS[2]}:${HOST_IP[2]}" "${extra[@]}"
done
