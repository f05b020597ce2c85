#!/usr/bin/env bash
# hora programs started without horarun: by OpenMPI's mpirun, MPICH's mpirun (Hydra), a
# simulated Slurm srun, and horarun --mpi; each rank finds rank, size and peers by itself and
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
  grep -q "HORA_SECRET is not set" "$tmp/out"; check "without HORA_SECRET, rank 0 warns that the job id keys the store" $?
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

OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=1 "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1
[ $? != 0 ] && grep -q "HORA_RENDEZVOUS_ADDR is not set (a job started by OpenMPI without horarun)" "$tmp/out"
check "a multi-host mpirun job without HORA_RENDEZVOUS_ADDR is told what to set" $?

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
