#!/usr/bin/env bash
# A real Slurm cluster on one machine: munged, slurmctld and one slurmd per host, the hosts being
# network namespaces (netns_hosts.sh) with their own addresses and hostnames. srun and sbatch
# start hora jobs across 2 hosts x 2 ranks; every collective checks clean; horarun inside an
# allocation uses its hosts; a rank killed under srun ends the step with errors naming it.
# usage: slurm_test.sh HORARUN HORA_BENCH     (exit 77: skipped, with the reason)
set -uo pipefail
horarun=$(realpath "$1") bench=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=netns_hosts.sh
. "$here/netns_hosts.sh"
hosts_available || { [ "${HORA_REQUIRE_MULTIHOST:-0}" = 1 ] && exit 1; exit 77; }
for tool in munged slurmctld slurmd srun sbatch sinfo; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (Debian: slurm-wlm, munge; scripts/setup.sh installs them)"; exit 77; }
done
hosts_up 2 || exit 1
h1=${HOST_IP[1]} h2=${HOST_IP[2]}
slurm="$HOSTS_DIR/slurm"

# Every daemon gets its files under $slurm; munged's socket is shared through the file system,
# the daemons talk over the hosts' addresses. Slurm's nodes are named by their addresses, so
# that SLURM_STEP_NODELIST (10.x.y.[1-2]) names a host rank 0 can be reached at.
slurm_down() {
  local f
  for f in "$slurm"/slurmd-*.pid "$slurm"/slurmctld.pid "$slurm"/munged.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  hosts_down
}
trap slurm_down EXIT
mkdir -p "$slurm/state" "$slurm/spool/$h1" "$slurm/spool/$h2"
chmod 755 "$HOSTS_DIR"  # munged wants its socket's directories searchable by all
head -c 1024 /dev/urandom >"$slurm/munge.key" && chmod 600 "$slurm/munge.key"
munged --socket="$slurm/munge.sock" --key-file="$slurm/munge.key" --pid-file="$slurm/munged.pid" \
  --log-file="$slurm/munged.log" --seed-file="$slurm/munge.seed" --force || { echo "munged did not start"; exit 1; }
cat >"$slurm/slurm.conf" <<EOC
ClusterName=hora
SlurmctldHost=hora-ctl($h1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$slurm/munge.sock
CredType=cred/munge
StateSaveLocation=$slurm/state
SlurmdSpoolDir=$slurm/spool/%n
SlurmctldPidFile=$slurm/slurmctld.pid
SlurmdPidFile=$slurm/slurmd-%n.pid
SlurmctldLogFile=$slurm/slurmctld.log
SlurmdLogFile=$slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$h1 CPUs=2 State=UNKNOWN
NodeName=$h2 CPUs=2 State=UNKNOWN
PartitionName=main Nodes=$h1,$h2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOC
# No cgroup v2 here: Slurm's v1 plugin on the machine's hierarchy (proctrack/linuxproc tracks tasks).
printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n' >"$slurm/cgroup.conf"
export SLURM_CONF="$slurm/slurm.conf"
ip netns exec "${HOST_NS[1]}" unshare --uts sh -c 'hostname hora-ctl && exec slurmctld -i' || exit 1
for i in 1 2; do
  ip netns exec "${HOST_NS[$i]}" unshare --uts sh -c "hostname hora-h$i && exec slurmd -N ${HOST_IP[$i]}" || exit 1
done
for _ in $(seq 1 100); do
  [ "$(on_host 1 sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ] && break
  sleep 0.2
done
[ "$(on_host 1 sinfo -h -o '%T %D' 2>/dev/null)" = "idle 2" ] || {
  echo "Slurm did not come up:"; on_host 1 sinfo; tail -n 5 "$slurm"/*.log; exit 1; }

passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp="$HOSTS_DIR/work"
mkdir -p "$tmp" && cd "$tmp" || exit 1
clean() { [ "$1" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out"; }

on_host 1 timeout 60 srun -N 2 -n 4 sh -c 'echo "$SLURM_PROCID $(hostname)"' >"$tmp/out" 2>&1
[ "$(sort "$tmp/out" | tr '\n' ';')" = "0 hora-h1;1 hora-h1;2 hora-h2;3 hora-h2;" ]
check "srun -N 2 -n 4 places 2 tasks on each host" $?

for op in allreduce allgather broadcast reducescatter alltoall; do
  on_host 1 timeout 120 srun -N 2 -n 4 "$bench" "$op" -b 4 -e 1M -f 32 -c 1 >"$tmp/out" 2>&1
  clean $?; check "srun -N 2 -n 4: $op across 2 hosts x 2 ranks checks clean" $?
done

python=$(cd "$here/../.." && pwd)/.venv/bin/python
if [ -x "$python" ]; then
  cat >"$tmp/train.py" <<'EOP'
import os
import torch
import hora.torch as hvd

hvd.init()
assert (hvd.size(), hvd.local_size(), hvd.cross_size()) == (4, 2, 2), (hvd.size(), hvd.local_size(), hvd.cross_size())
total = hvd.allreduce(torch.full((1000,), float(hvd.rank() + 1)), op=hvd.Sum)
gathered = hvd.allgather(torch.tensor([hvd.rank()]))
root = hvd.broadcast(torch.tensor([hvd.rank() * 10.0]), root_rank=3)
ok = bool((total == 10).all()) and gathered.tolist() == [0, 1, 2, 3] and root.item() == 30.0
os.write(1, f"TRAIN rank {hvd.rank()} ok={ok}\n".encode())
EOP
  on_host 1 timeout 120 srun -N 2 -n 4 "$python" "$tmp/train.py" >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && [ "$(grep -c "^TRAIN rank [0-3] ok=True" "$tmp/out")" = 4 ]
  check "srun -N 2 -n 4 python train.py: hora.torch's allreduce, allgather, broadcast agree (code $code)" $?
fi

cat >"$tmp/job.sh" <<EOS
#!/bin/sh
#SBATCH -N 2
#SBATCH -n 4
#SBATCH -o $tmp/batch.out
srun "$bench" allreduce -b 4 -e 1M -f 32 -c 1
EOS
on_host 1 timeout 120 sbatch --wait "$tmp/job.sh" >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/batch.out"
check "sbatch --wait of a script that sruns an allreduce on 2 hosts: clean (code $code)" $?

# horarun inside an allocation, given no hosts: the allocation's (SLURM_JOB_NODELIST with
# SLURM_TASKS_PER_NODE), reached over ssh as horarun reaches any host.
on_host 1 timeout 120 salloc -N 2 -n 4 "$horarun" -i "$SSH_KEY" -np 4 sh -c 'echo "$HORA_RANK $HORA_HOSTNAME"' \
  >"$tmp/out" 2>&1
[ "$(grep '<stdout>:' "$tmp/out" | sed 's/^\[[0-9]\]<stdout>://' | sort | tr '\n' ';')" = "0 $h1;1 $h1;2 $h2;3 $h2;" ]
check "horarun in a salloc allocation places its ranks on the allocation's hosts" $?
on_host 1 timeout 120 salloc -N 2 -n 4 "$horarun" -i "$SSH_KEY" -np 4 "$bench" allreduce -b 4 -e 1M -f 32 -c 1 \
  >"$tmp/out" 2>&1
clean $?; check "horarun in a salloc allocation: allreduce across its 2 hosts checks clean" $?

# Rank 3 is SIGKILLed in the middle of a stream of allreduces: the step ends, srun names the
# task, and the surviving ranks' errors name rank 3.
start=$SECONDS
on_host 1 timeout 120 srun -N 2 -n 4 --export=ALL,HORA_TIMEOUT_SECONDS=5 sh -c \
  '[ "$SLURM_PROCID" = 3 ] && (sleep 3; kill -9 $$) & exec "$0" allreduce -b 1M -e 1M -n 1000000 -w 0 -c 0' \
  "$bench" >"$tmp/out" 2>&1
code=$?
[ "$code" != 0 ] && [ "$code" != 124 ] && [ $((SECONDS - start)) -lt 60 ]
check "a rank SIGKILLed under srun ends the step (code $code, $((SECONDS - start)) s)" $?
grep -q "task 3: Killed" "$tmp/out"; check "srun names the killed task" $?
errors=$(grep -cE "(receiving from|sending to) rank 3 .*failed|rank 3 \(.*closed its connection|timed out.*rank 3" "$tmp/out")
[ "$errors" -ge 1 ]; check "the other ranks' errors name rank 3 ($errors lines)" $?
[ "$errors" -ge 1 ] || tail -n 20 "$tmp/out"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
