#!/usr/bin/env bash
# hora programs started without horarun: by OpenMPI's mpirun, MPICH's mpirun (Hydra), a
# simulated Slurm srun, a cluster manager's TF_CONFIG, and horarun --mpi; each rank finds rank, size and peers by itself and
# every collective checks clean against the reference.
# usage: foreign_launch_test.sh HORARUN HORA_BENCH
set -uo pipefail
horarun=$(realpath "$1") bench=$(realpath "$2")
passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
clean() { [ "$1" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out"; }

if command -v mpirun.openmpi >/dev/null; then
  for op in allreduce allgather broadcast reducescatter alltoall; do
    timeout 120 mpirun.openmpi -np 3 "$bench" "$op" -b 4 -e 1M -f 32 -c 1 >"$tmp/out" 2>&1
    clean $?; check "OpenMPI mpirun -np 3: $op checks clean" $?
  done
  ! grep -q "HORA_SECRET is not set" "$tmp/out"; check "OpenMPI: a random job secret comes through PMIx (no warning)" $?
  HORA_LOG_LEVEL=debug timeout 120 mpirun.openmpi -x HORA_LOG_LEVEL -np 2 "$bench" allreduce -b 4 -e 4 -c 1 >"$tmp/out" 2>&1
  clean $? && grep -q "rendezvous store at 127.0.0.1:[0-9]*, learned through pmix" "$tmp/out"
  check "OpenMPI: rank 0's store is learned through PMIx, on loopback for a one-host job" $?
  HORA_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n') timeout 120 mpirun.openmpi -x HORA_SECRET -np 2 \
    "$bench" allreduce -b 4 -e 64K -c 1 >"$tmp/out" 2>&1
  clean $? && ! grep -q "HORA_SECRET is not set" "$tmp/out"; check "OpenMPI mpirun -x HORA_SECRET: no warning, clean" $?
  # Two jobs at once on one host get different store ports from their job ids.
  timeout 120 mpirun.openmpi -np 2 "$bench" allreduce -b 4 -e 4M -f 4 -c 1 >"$tmp/out1" 2>&1 &
  timeout 120 mpirun.openmpi -np 2 "$bench" allreduce -b 4 -e 4M -f 4 -c 1 >"$tmp/out" 2>&1
  clean $? && wait $! && grep -q "0 OK" "$tmp/out1"; check "two OpenMPI jobs at once on one host do not collide" $?
  timeout 120 "$horarun" --mpi -np 3 -x HORA_LOG_LEVEL=warning "$bench" allreduce -b 4 -e 1M -f 32 -c 1 >"$tmp/out" 2>&1
  clean $? && ! grep -q "HORA_SECRET is not set" "$tmp/out"; check "horarun --mpi delegates to mpirun with the job secret in the environment" $?
else
  echo "SKIP: OpenMPI's mpirun is not installed"
fi

if command -v mpirun.mpich >/dev/null; then
  for op in allreduce allgather alltoall; do
    timeout 120 mpirun.mpich -np 3 "$bench" "$op" -b 4 -e 1M -f 32 -c 1 >"$tmp/out" 2>&1
    clean $?; check "MPICH mpirun -np 3: $op checks clean" $?
  done
  timeout 120 mpirun.mpich -np 2 -genv HORA_LOG_LEVEL debug "$bench" allreduce -b 4 -e 4 -c 1 >"$tmp/out" 2>&1
  clean $? && grep -q "learned through pmi-fd" "$tmp/out" && ! grep -q "HORA_SECRET is not set" "$tmp/out"
  check "MPICH: rank 0's store and a random secret are learned over PMI-1 (PMI_FD)" $?
  # Two jobs at once: free ports from the kernel, so they cannot collide.
  timeout 120 mpirun.mpich -np 2 "$bench" allreduce -b 4 -e 4M -f 4 -c 1 >"$tmp/out1" 2>&1 &
  timeout 120 mpirun.mpich -np 2 "$bench" allreduce -b 4 -e 4M -f 4 -c 1 >"$tmp/out" 2>&1
  clean $? && wait $! && grep -q "0 OK" "$tmp/out1"; check "two MPICH jobs at once on one host do not collide" $?
  # A PMI_FD that is no process manager: the error says what to set instead.
  PMI_SIZE=2 PMI_RANK=1 PMI_FD=55 "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1
  [ $? != 0 ] && grep -q "rank 1 cannot use the MPI launcher's key-value service.*PMI_FD=55.*set HORA_RENDEZVOUS_ADDR" "$tmp/out"
  check "an unusable PMI_FD fails rank 1 naming it and what to set by hand" $?
else
  echo "SKIP: MPICH's mpirun is not installed"
fi

# Slurm's srun, simulated: the variables srun sets, one process per task.
pids=()
for r in 0 1 2; do
  SLURM_NTASKS=3 SLURM_PROCID=$r SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_STEP_NUM_NODES=1 SLURM_STEP_NODELIST=localhost \
    timeout 120 "$bench" allreduce -b 4 -e 1M -f 32 -c 1 >"$tmp/slurm$r" 2>&1 &
  pids+=($!)
done
ok=0
for p in "${pids[@]}"; do wait "$p" || ok=1; done
[ $ok = 0 ] && grep -q "0 OK" "$tmp/slurm0"; check "simulated srun (SLURM_* of 3 tasks) checks clean" $?
grep -q "HORA_SECRET is not set" "$tmp/slurm0"; check "without a key-value service or HORA_SECRET, rank 0 warns that the job id keys the store" $?

# A cluster manager's TF_CONFIG (Kubeflow's TFJob): a chief and two workers, rank 0 (the chief)
# serving the store at its own entry's port.
port=$((20000 + RANDOM % 10000))
cluster="{\"chief\": [\"localhost:$port\"], \"worker\": [\"localhost:$((port + 1))\", \"localhost:$((port + 2))\"]}"
pids=()
for task in chief:0 worker:0 worker:1; do
  TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"${task%:*}\", \"index\": ${task#*:}}}" HORA_SECRET=tfjob \
    timeout 120 "$bench" allreduce -b 4 -e 1M -f 32 -c 1 >"$tmp/tf_${task/:/}" 2>&1 &
  pids+=($!)
done
ok=0
for p in "${pids[@]}"; do wait "$p" || ok=1; done
[ $ok = 0 ] && grep -q "0 OK" "$tmp/tf_chief0" && grep -q "allreduce: 3 ranks" "$tmp/tf_chief0"
check "TF_CONFIG of a chief and two workers: 3 ranks that check clean" $?
TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"ps\", \"index\": 0}}" "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1
[ $? != 0 ] && grep -q "TF_CONFIG: task type 'ps' does not train" "$tmp/out"
check "a TF_CONFIG task that does not train (ps) is refused naming TF_CONFIG" $?

OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=1 "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1
[ $? != 0 ] && grep -q "HORA_RENDEZVOUS_ADDR is not set (a job started by OpenMPI without horarun) and OpenMPI offers no key-value service.*PMIX_NAMESPACE is not set" "$tmp/out"
check "a multi-host mpirun job without PMIx nor HORA_RENDEZVOUS_ADDR is told what to set" $?
env OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=1 PMIX_NAMESPACE=1 \
  PMIX_SERVER_URI41="1.0;tcp4://127.0.0.1:1" PMIX_SERVER_URI4="1.0;tcp4://127.0.0.1:1" PMIX_SERVER_URI3="1.0;tcp4://127.0.0.1:1" \
  PMIX_SERVER_URI2="1.0;tcp4://127.0.0.1:1" PMIX_SERVER_URI21="1.0;tcp4://127.0.0.1:1" PMIX_RANK=1 \
  HORA_TIMEOUT_SECONDS=5 timeout 60 "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1
code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] && grep -q "rank 1 cannot use the MPI launcher's key-value service.*PMIx.*set HORA_RENDEZVOUS_ADDR" "$tmp/out"
check "an unreachable PMIx server fails rank 1 naming PMIx and what to set by hand" $?

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
