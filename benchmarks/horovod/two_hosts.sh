#!/usr/bin/env bash
# hora and Horovod 0.28.1 side by side across 2 namespace hosts (tests/integration/netns_hosts.sh)
# whose links tbf caps: workloads.py's allreduce (4-byte latency, busbw at 1, 16, 64 MiB) and cnn
# (images/s), with --workload wrn its WRN-16-10 (images/s over 8 steps), tta its CNN to 85% test
# accuracy (seconds), keras-cnn and keras-wrn keras_bench.py's model.fit through
# horovod.tensorflow.keras (images/s), and with --workload
# synthetic Horovod's pytorch_synthetic_benchmark.py (resnet18, batch 32; its v0.28.1 file given
# by --synthetic-script, since Horovod's sdist has no examples),
# one rank per host, the two frameworks taking turns in every round; then a cut link:
# workloads.py fail (1 MiB allreduces in a loop), the second host's link taken down at its step
# 20, and the seconds until no process of the job is left on either host (capped at --cap).
#
#   hora     its `horovodrun` (horarun, through the horovod alias in .venv) with -H and -i
#   Horovod  OpenMPI's mpirun with -H over the hosts' sshd (Horovod's MPI controller and MPI's TCP
#            transport): Horovod's own `horovodrun --gloo` across these hosts ends in
#            gloo::IoException on rank 0 after rank 1 exits silently during hvd.init()
#
# usage: benchmarks/horovod/two_hosts.sh [--rate R]... [--repeat N] [--cap S] [--horovod-dir DIR]
#            [--out FILE] [--cuts-only | --no-cuts] [--synthetic-script FILE]
#            [--workload allreduce|cnn|wrn|tta|keras-cnn|keras-wrn|synthetic]...
#   (as root; --rate default 1gbit 10gbit, --repeat 3, Horovod from setup_horovod.sh's DIR,
#   default ~/.cache/hora-bench). Every run's RESULT goes to FILE (JSON lines), the cut links to
#   FILE's name with .cuts.jsonl, then the tables.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rates=() workloads_to_run=() synthetic="" repeat=3 cap=60 horovod_dir=$HOME/.cache/hora-bench out="" measure=1 cut_links=1
while (($#)); do
  case $1 in
    --rate) rates+=("$2"); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --horovod-dir) horovod_dir=$2; shift 2 ;;
    --out) out=$(realpath "$2"); shift 2 ;;
    --cuts-only) measure=0; shift ;;
    --no-cuts) cut_links=0; shift ;;
    --workload) workloads_to_run+=("$2"); shift 2 ;;
    --synthetic-script) synthetic=$(realpath "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
((${#rates[@]})) || rates=(1gbit 10gbit)
((${#workloads_to_run[@]})) || workloads_to_run=(allreduce cnn)
if [[ " ${workloads_to_run[*]} " == *" synthetic "* && ! -f "$synthetic" ]]; then
  echo "two_hosts: --workload synthetic needs --synthetic-script (Horovod v0.28.1's examples/pytorch/pytorch_synthetic_benchmark.py)" >&2
  exit 2
fi
hora_venv=$root/.venv horovod_venv=$horovod_dir/horovod-venv
workloads=$root/benchmarks/horovod/workloads.py keras_bench=$root/benchmarks/tensorflow/keras_bench.py
for venv in "$hora_venv" "$horovod_venv"; do
  "$venv/bin/python" -c "import horovod.torch" 2>/dev/null \
    || { echo "two_hosts: no horovod.torch in $venv (see side_by_side.py's usage)" >&2; exit 1; }
done
. "$root/tests/integration/netns_hosts.sh"
hosts_available || exit 77
hosts_up 2
trap hosts_kill_and_down EXIT
[ -n "$out" ] || out=$HOSTS_DIR/two_hosts.jsonl
cuts=${out%.jsonl}.cuts.jsonl table=$root/benchmarks/horovod/two_hosts_table.py
: >"$out"; : >"$cuts"
hosts="${HOST_IP[1]}:1,${HOST_IP[2]}:1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# command_for FRAMEWORK WORKLOAD: sets cmd to the job's command (run on the first host)
command_for() {
  local program=("$workloads" "$2")
  case $2 in
    wrn) program+=(--steps 8 --warmup 2) ;;
    keras-cnn | keras-wrn)  # model.fit through `import horovod.tensorflow.keras`
      program=("$keras_bench" --worker hora --api horovod.tensorflow.keras --model "${2#keras-}" --ranks 2
               --steps "$([ "$2" = keras-cnn ] && echo 200 || echo 12)" --warmup 5) ;;
  esac
  [ "$2" != synthetic ] || program=("$synthetic" --model resnet18 --batch-size 32 --num-warmup-batches 2
                                    --num-batches-per-iter 3 --num-iters 3)
  if [ "$1" = hora ]; then
    cmd=(env -u PYTHONPATH PATH="$hora_venv/bin:$PATH" "$hora_venv/bin/horovodrun" -np 2 -H "$hosts"
         -i "$SSH_KEY" -x OMP_NUM_THREADS=1 -x TF_CPP_MIN_LOG_LEVEL=2 "$hora_venv/bin/python" "${program[@]}")
  else
    cmd=(env -u PYTHONPATH mpirun.openmpi -np 2 -H "$hosts" --mca plm_rsh_args "-i $SSH_KEY"
         --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x OMP_NUM_THREADS=1 -x TF_CPP_MIN_LOG_LEVEL=2
         -x PATH="$horovod_venv/bin:/usr/bin:/bin" "$horovod_venv/bin/python" "${program[@]}")
  fi
}

# result_of WORKLOAD: the job's output (stdin) -> its RESULT line's JSON, or nothing
result_of() {
  if [ "$1" = synthetic ]; then
    sed -n 's|.*Total img/sec on [0-9]* CPU(s): \([0-9.]*\) .*|{"synthetic_images_per_sec": \1}|p' | head -n 1
  elif [[ $1 == keras-* ]]; then  # keras_bench.py: the job's images/s as rank 0's clock saw them
    sed -n "s|.*RESULT rank=0 images_per_s=\([0-9.]*\).*|{\"workload\": \"$1\", \"images_per_sec\": \1}|p" | head -n 1
  else
    grep -o 'RESULT .*' | head -n 1 | sed 's/^RESULT //'
  fi
}

for rate in "${rates[@]}"; do
  ((measure)) || break
  cap_links "$rate"
  for run in $(seq 1 "$repeat"); do
    for workload in "${workloads_to_run[@]}"; do
      for framework in hora Horovod; do
        echo "$(date +%T) $rate round $run/$repeat: $workload, $framework" >&2
        command_for "$framework" "$workload"
        line=$(timeout 600 ip netns exec "${HOST_NS[1]}" "${cmd[@]}" 2>&1 | result_of "$workload" || true)
        [ -n "$line" ] || { echo "two_hosts: $framework $workload at $rate gave no result" >&2; exit 1; }
        printf '{"framework": "%s", "rate": "%s", "run": %d, "load": %s, "result": %s}\n' "$framework" "$rate" \
          "$run" "$(cut -d' ' -f1 /proc/loadavg)" "$line" >>"$out"
      done
    done
  done
done
# cut_link FRAMEWORK RUN: the job's lines after the cut and how long its processes outlived it
cut_link() {
  local log=$HOSTS_DIR/cut.log job cut_at left waited
  command_for "$1" fail
  ip netns exec "${HOST_NS[1]}" "${cmd[@]}" >"$log" 2>&1 &
  job=$!
  for _ in $(seq 1 1200); do grep -q "STEP 20 size 2 rank 1" "$log" && break; sleep 0.1; done
  ip link set "hv${HOSTS_ID}h2" down
  cut_at=$(date +%s.%N) waited=0
  while :; do  # until nothing of the job runs on either host
    left=$(hosts_pgrep "workloads.py|horovodrun|mpirun|orted|horarun")
    [ -n "$left" ] && ((waited < cap * 10)) || break
    sleep 0.1; waited=$((waited + 1))
  done
  local seconds; seconds=$(echo "$(date +%s.%N) - $cut_at" | bc)
  [ -z "$left" ] || { kill -9 $left 2>/dev/null || true; seconds="$cap (cap: still running)"; }
  wait "$job" 2>/dev/null || true
  ip link set "hv${HOSTS_ID}h2" up
  "$hora_venv/bin/python" "$table" cut "$1" "$2" "$seconds" "$log" >>"$cuts"
}

cap_links "${rates[0]}"
for run in $(seq 1 "$repeat"); do
  ((cut_links)) || break
  for framework in hora Horovod; do
    echo "$(date +%T) a cut link, round $run/$repeat: $framework" >&2
    cut_link "$framework" "$run"
  done
done
"$hora_venv/bin/python" "$table" table "$out" "$cuts"
