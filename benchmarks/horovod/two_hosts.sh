#!/usr/bin/env bash
# hora and Horovod 0.28.1 side by side across 2 namespace hosts (tests/integration/netns_hosts.sh)
# whose links tbf caps: workloads.py's allreduce (4-byte latency, busbw at 1, 16, 64 MiB) and cnn
# (images/s), one rank per host, the two frameworks taking turns in every round.
#
#   hora     its `horovodrun` (horarun, through the horovod alias in .venv) with -H and -i
#   Horovod  OpenMPI's mpirun with -H over the hosts' sshd (Horovod's MPI controller and MPI's TCP
#            transport): Horovod's own `horovodrun --gloo` across these hosts ends in
#            gloo::IoException on rank 0 after rank 1 exits silently during hvd.init()
#
# usage: benchmarks/horovod/two_hosts.sh [--rate R]... [--repeat N] [--horovod-dir DIR] [--out FILE]
#   (as root; --rate default 1gbit 10gbit, --repeat 3, Horovod from setup_horovod.sh's DIR,
#   default ~/.cache/hora-bench). Every run's RESULT goes to FILE (JSON lines), then the table.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rates=() repeat=3 horovod_dir=$HOME/.cache/hora-bench out=""
while (($#)); do
  case $1 in
    --rate) rates+=("$2"); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --horovod-dir) horovod_dir=$2; shift 2 ;;
    --out) out=$(realpath "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#rates[@]})) || rates=(1gbit 10gbit)
hora_venv=$root/.venv horovod_venv=$horovod_dir/horovod-venv
workloads=$root/benchmarks/horovod/workloads.py
for venv in "$hora_venv" "$horovod_venv"; do
  "$venv/bin/python" -c "import horovod.torch" 2>/dev/null \
    || { echo "two_hosts: no horovod.torch in $venv (see side_by_side.py's usage)" >&2; exit 1; }
done
. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77
hosts_up 2
cleanup() {
  local i pids
  for i in 1 2; do  # whatever still runs inside the hosts goes with them
    pids=$(ip netns pids "${HOST_NS[$i]}" 2>/dev/null || true)
    # shellcheck disable=SC2086  # one pid per word
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  done
  hosts_down
}
trap cleanup EXIT
[ -n "$out" ] || out=$HOSTS_DIR/two_hosts.jsonl
: >"$out"
hosts="${HOST_IP[1]}:1,${HOST_IP[2]}:1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# command_for FRAMEWORK WORKLOAD: sets cmd to the job's command (run on the first host)
command_for() {
  if [ "$1" = hora ]; then
    cmd=(env -u PYTHONPATH PATH="$hora_venv/bin:$PATH" "$hora_venv/bin/horovodrun" -np 2 -H "$hosts"
         -i "$SSH_KEY" -x OMP_NUM_THREADS=1 "$hora_venv/bin/python" "$workloads" "$2")
  else
    cmd=(env -u PYTHONPATH mpirun.openmpi -np 2 -H "$hosts" --mca plm_rsh_args "-i $SSH_KEY"
         --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS=1
         -x PATH="$horovod_venv/bin:/usr/bin:/bin" "$horovod_venv/bin/python" "$workloads" "$2")
  fi
}

for rate in "${rates[@]}"; do
  cap_links "$rate"
  for run in $(seq 1 "$repeat"); do
    for workload in allreduce cnn; do
      for framework in hora Horovod; do
        echo "$(date +%T) $rate round $run/$repeat: $workload, $framework" >&2
        command_for "$framework" "$workload"
        line=$(timeout 600 ip netns exec "${HOST_NS[1]}" "${cmd[@]}" 2>&1 | grep -o 'RESULT .*' | head -n 1 || true)
        [ -n "$line" ] || { echo "two_hosts: $framework $workload at $rate gave no result" >&2; exit 1; }
        printf '{"framework": "%s", "rate": "%s", "run": %d, "load": %s, "result": %s}\n' "$framework" "$rate" \
          "$run" "$(cut -d' ' -f1 /proc/loadavg)" "${line#RESULT }" >>"$out"
      done
    done
  done
done
"$hora_venv/bin/python" "$root/benchmarks/horovod/two_hosts_table.py" "$out"
