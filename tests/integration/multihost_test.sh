#!/usr/bin/env bash
# horarun across hosts, for real: hosts are network namespaces on a bridge with their own sshd
# (netns_hosts.sh). Ranks on remote hosts start over ssh; every collective is checked across
# hosts x local ranks, also with uneven hosts; failures, signals and a killed horarun leave no
# process behind on any host; ssh and reachability errors are named.
# usage: multihost_test.sh HORARUN HORA_BENCH        (exit 77: skipped, with the reason)
set -uo pipefail
horarun=$(realpath "$1") bench=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=netns_hosts.sh
. "$here/netns_hosts.sh"
hosts_available || { [ "${HORA_REQUIRE_MULTIHOST:-0}" = 1 ] && exit 1; exit 77; }
hosts_up 3 || exit 1
passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp="$HOSTS_DIR/work"
mkdir -p "$tmp"
cd "$tmp" || exit 1
h1=${HOST_IP[1]} h2=${HOST_IP[2]} h3=${HOST_IP[3]}
run() { on_host 1 "$horarun" -i "$SSH_KEY" "$@"; }  # horarun runs on host 1
no_leftovers() {  # no_leftovers MARKER: nothing of the job runs on any of this run's hosts
  local i pid
  for i in $(seq 1 30); do [ -z "$(hosts_pgrep "$1")" ] && return 0; sleep 0.1; done
  for pid in $(hosts_pgrep "$1"); do ps -o pid=,args= -p "$pid"; done; return 1
}

run -np 4 -H "$h1:2,$h2:2" sh -c 'echo "$HORA_RANK $HORA_HOSTNAME $HORA_LOCAL_RANK/$HORA_LOCAL_SIZE $HORA_CROSS_RANK/$HORA_CROSS_SIZE $(pwd)"' >"$tmp/out" 2>&1
[ "$(sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort | tr '\n' ';')" = \
  "0 $h1 0/2 0/2 $tmp;1 $h1 1/2 0/2 $tmp;2 $h2 0/2 1/2 $tmp;3 $h2 1/2 1/2 $tmp;" ]
check "ranks fill hosts in order; remote ranks get the HORA_* environment and the working directory" $?
run -np 2 -H "$h1:1,$h2:1" sh -c 'cat /proc/$$/cmdline | tr "\0" " "; echo; ps -eo args' >"$tmp/out" 2>&1
! grep -q "HORA_SECRET=" "$tmp/out" && ! grep -E -q '[0-9a-f]{64}' "$tmp/out"
check "the job secret is on no command line of any host" $?

# The launcher's environment reaches the remote ranks as horovodrun's does: the issue's two
# commands as written (a virtualenv on PATH; a knob exported before horarun), values with
# spaces, quotes, newlines and unicode intact over ssh; host-specific variables stay behind.
venv=$(cd "$here/../.." && pwd)/.venv
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import hora.torch' 2>/dev/null; then
  on_host 1 env PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$horarun" -i "$SSH_KEY" -np 4 -H "$h1:2,$h2:2" \
    python -c 'import hora.torch as h; h.init(); print("imported", h.rank(), h.size(), h.cross_size())' >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && [ "$(grep -c '<stdout>:imported [0-3] 4 2$' "$tmp/out")" = 4 ]
  check "a virtualenv's python imports hora.torch on remote ranks with no -x (code $code)" $?
  [ "$code" = 0 ] || tail -n 5 "$tmp/out"
fi
on_host 1 env HORA_HIERARCHICAL_ALLREDUCE=0 HORA_LOG_LEVEL=info "$horarun" -i "$SSH_KEY" -np 4 -H "$h1:2,$h2:2" \
  "$bench" allreduce -b 4 -e 4M -f 64 -c 1 >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && ! grep -q "hierarchical collectives ready" "$tmp/out"
check "HORA_HIERARCHICAL_ALLREDUCE=0 before horarun: every rank runs flat, correct (code $code)" $?
odd="a b  'c' \"d\" \$e \\f \`g\`;
second line ünï 漢字 *"
on_host 1 env HORA_ODD_VALUE="$odd" SSH_HORA_PROBE=1 DISPLAY=:42 HORA_X_PROBE=launcher "$horarun" -i "$SSH_KEY" -np 2 \
  -H "$h1:1,$h2:1" -x HORA_X_PROBE="by -x" sh -c \
  'printf "%s|%s|%s|%s" "$HORA_ODD_VALUE" "${SSH_HORA_PROBE-unset}" "${DISPLAY-unset}" "$HORA_X_PROBE" \
     >"'"$tmp"'/env.$HORA_RANK"' >"$tmp/out" 2>&1
[ "$(cat "$tmp/env.1")" = "$odd|unset|unset|by -x" ] && [ "$(cat "$tmp/env.0")" = "$odd|1|:42|by -x" ]
check "a remote rank gets the launcher's variables intact over ssh, -x winning, but not SSH_* or DISPLAY" $?
on_host 1 env HORA_BIG_VALUE="$(head -c 130000 /dev/zero | tr '\0' x)" "$horarun" -i "$SSH_KEY" -np 2 \
  -H "$h1:1,$h2:1" sh -c 'echo "size-$HORA_RANK-${#HORA_BIG_VALUE}"' >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && grep -q "size-1-130000" "$tmp/out"
check "an environment larger than one command-line argument reaches a remote rank whole (code $code)" $?
start_ms=$(date +%s%3N)
run -np 4 -H "$h1:2,$h2:2" sh -c '[ "$HORA_CROSS_RANK" = 1 ] && export HORA_HIERARCHICAL_ALLREDUCE=0
  exec '"$bench"' allreduce -b 4 -e 4 -n 1 -w 0' >"$tmp/out" 2>&1
code=$?
took=$(( $(date +%s%3N) - start_ms ))
[ "$code" != 0 ] && [ "$took" -lt 10000 ] &&
  grep -q "HORA_HIERARCHICAL_ALLREDUCE is '0' on ranks 2-3 but 'auto' (the default) on ranks 0-1" "$tmp/out"
check "a knob set on one host only fails the job at init, naming it ($took ms incl. ssh start-up, code $code)" $?

# The flat algorithms (hierarchy off), each over shared memory between the ranks of a host and
# TCP between hosts: the log says so on every rank that shares its host.
for spec in "$h1:2,$h2:2" "$h1:3,$h2:1" "$h1:1,$h2:1,$h3:2"; do
  sharing=$(( $(echo "$spec" | tr ',' '\n' | cut -d: -f2 | awk '$1 > 1 { n += $1 } END { print n + 0 }') ))
  for op in allreduce allgather broadcast reducescatter alltoall; do
    run -np 4 -H "$spec" -x HORA_HIERARCHICAL_ALLREDUCE=0 -x HORA_HIERARCHICAL_ALLGATHER=0 \
      -x HORA_HIERARCHICAL_BROADCAST=0 -x HORA_LOG_LEVEL=info "$bench" "$op" -b 4 -e 2M -f 32 -c 1 >"$tmp/out" 2>&1
    code=$?
    mixed=$(grep -c "transport: shared memory with [1-9] other rank(s) of host" "$tmp/out")
    [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && [ "$mixed" = "$sharing" ]
    check "$op across hosts $spec checks clean against the reference, $mixed ranks mixing shm and tcp (code $code)" $?
  done
done

# Hierarchical allreduce (within each host over shared memory, then among hosts over TCP), forced
# for every size, every op, even hosts of 2 and 3 ranks; then the hierarchical allgather and
# broadcast; uneven hosts fall back to the flat algorithms.
for spec in "$h1:2,$h2:2" "$h1:2,$h2:2,$h3:2" "$h1:3,$h2:3"; do
  np=$(( $(echo "$spec" | tr ',' '\n' | cut -d: -f2 | paste -sd+) ))
  for op in sum average min max product; do
    run -np "$np" -H "$spec" --hierarchical-allreduce -x HORA_LOG_LEVEL=info "$bench" allreduce -b 4 -e 4M -f 64 \
      -o "$op" -d float64 -c 1 >"$tmp/out" 2>&1
    code=$?
    [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && grep -q "hierarchical collectives ready" "$tmp/out"
    check "hierarchical allreduce $op across hosts $spec checks clean (code $code)" $?
  done
  for op in allgather broadcast; do
    # (auto takes the hierarchy for allgather; for broadcast only when ranks are not placed host
    # by host, as they are here.)
    run -np "$np" -H "$spec" -x HORA_HIERARCHICAL_BROADCAST=1 -x HORA_LOG_LEVEL=info "$bench" "$op" -b 4 -e 4M -f 8 \
      -c 1 >"$tmp/out" 2>&1
    code=$?
    [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && grep -q "hierarchical collectives ready" "$tmp/out"
    check "hierarchical $op across hosts $spec checks clean (code $code)" $?
  done
  # Building the hierarchy's inner groups leaves every rank's log tag its rank in the job (a
  # split once set it to the rank inside the split).
  mistagged=$(awk '/<stderr>:\[hora .* rank [0-9]+\]/ {
      horarun_rank = substr($0, 2, index($0, "]") - 2); match($0, / rank [0-9]+\]/)
      if (substr($0, RSTART + 6, RLENGTH - 7) != horarun_rank) print }' "$tmp/out" | head -3)
  [ -z "$mistagged" ]; check "log lines carry the job's rank after the hierarchy is built $mistagged" $?
done
run -np 4 -H "$h1:3,$h2:1" --hierarchical-allreduce -x HORA_LOG_LEVEL=info "$bench" allreduce -b 4 -e 4M -f 64 -c 1 \
  >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && grep -q "hierarchical collectives not possible" "$tmp/out"
check "uneven hosts 3+1: the flat ring instead, correct (code $code)" $?

# A link cut in the middle of a stream of allreduces: every rank fails with an error naming a
# peer (the heartbeat's verdict on a silent peer, or a collective's timeout) within seconds, and
# horarun ends; nothing hangs. The cut
# waits until every rank runs collectives (on a loaded machine the remote ranks' ssh start can
# take seconds).
run -np 4 -H "$h1:2,$h2:2" -x HORA_TIMEOUT_SECONDS=5 -x HORA_LOG_LEVEL=info "$bench" allreduce -b 8M -e 8M \
  -n 100000 -w 0 -c 0 >"$tmp/out" 2>&1 &
runner=$!
for _ in $(seq 1 300); do
  [ "$(grep -c "hierarchical collectives ready" "$tmp/out")" -ge 4 ] && break
  sleep 0.1
done
sleep 1
ip link set "hv${HOSTS_ID}h2" down
cut_at=$SECONDS
wait "$runner"; code=$?
ip link set "hv${HOSTS_ID}h2" up
[ "$code" != 0 ] && [ $((SECONDS - cut_at)) -le 15 ]
check "a cut link ends the job (code $code, $((SECONDS - cut_at)) s after the cut)" $?
errors=$(grep -E "^\[[0-3]\]<stderr>:.*(TimeoutError|PeerError|timed out|closed its connection|sent no heartbeat)" \
  "$tmp/out" | grep -cE "rank [0-3] \(")  # a peer is named with its address: "rank 2 (10.0.0.2:4100)"
[ "$errors" -ge 2 ]; check "ranks name the peer they lost ($errors error lines)" $?
[ "$errors" -ge 2 ] || tail -n 30 "$tmp/out"  # what the job said instead
no_leftovers "allreduce -b 8M -e 8M -n 100000"; check "nothing of the cut job is left on any host" $?

start=$SECONDS
run -np 4 -H "$h1:2,$h2:2" sh -c 'if [ "$HORA_RANK" = 3 ]; then sleep 0.5; exit 5; fi; exec sleep 4242' >"$tmp/out" 2>&1
code=$?
[ "$code" = 5 ] && [ $((SECONDS - start)) -lt 6 ]; check "a failed remote rank's code is horarun's, within 5 s (code $code, $((SECONDS - start)) s)" $?
grep -q "rank 3 on host $h2 exited with code 5" "$tmp/out"; check "horarun names the failed rank and its host" $?
no_leftovers "sleep 4242"; check "no process of the failed job is left on any host" $?

run -np 4 -H "$h1:2,$h2:2" sh -c 'exec sleep 4343' >"$tmp/out" 2>&1 &
runner=$!
sleep 1.5
pkill -TERM -f "horarun -i $SSH_KEY -np 4 -H $h1:2,$h2:2 sh -c exec sleep 4343"
wait "$runner"; code=$?
[ "$code" = $((128 + 15)) ]; check "SIGTERM to horarun ends the job with 143 (code $code)" $?
no_leftovers "sleep 4343"; check "SIGTERM reaches the remote workers: nothing is left" $?

run -np 4 -H "$h1:2,$h2:2" sh -c 'exec sleep 4444' >"$tmp/out" 2>&1 &
runner=$!
sleep 1.5
pkill -KILL -f "horarun -i $SSH_KEY -np 4 -H $h1:2,$h2:2 sh -c exec sleep 4444"
wait "$runner" 2>/dev/null
no_leftovers "sleep 4444"; check "a SIGKILLed horarun leaves no worker on any host" $?

run -np 1 -H "$h2:1" no-such-command-hora >"$tmp/out" 2>&1; code=$?
[ "$code" = 127 ] && grep -q "command not found on host $h2: no-such-command-hora" "$tmp/out"
check "a command missing on a remote host is named with the host (code $code)" $?

ssh-keygen -q -t ed25519 -N '' -f "$tmp/stranger_key"
start=$SECONDS
on_host 1 "$horarun" -i "$tmp/stranger_key" -np 2 -H "$h1:1,$h2:1" true >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q "rank 1 on host $h2" "$tmp/out" && grep -q "Permission denied" "$tmp/out"
check "an ssh login failure is named with rank and host (code $code)" $?

start=$SECONDS
run -np 2 --start-timeout 3 -H "$h1:1,10.199.$(( HOSTS_ID % 250 )).99:1" true >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && [ $((SECONDS - start)) -lt 15 ] && grep -q "rank 1 on host 10.199.$(( HOSTS_ID % 250 )).99" "$tmp/out"
check "an unreachable host fails the job in time, named (code $code, $((SECONDS - start)) s)" $?

run -np 2 --start-timeout 2 -H "$h1:1,$h2:1" sh -c '[ "$HORA_RANK" = 1 ] && exec sleep 4545; '"$bench"' allreduce -b 4 -e 4 -n 1 -w 0' >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q "rank 1 on host $h2 did not reach the rendezvous store within --start-timeout 2 s" "$tmp/out"
check "a remote rank that never reaches the rendezvous is named with its host (code $code)" $?
no_leftovers "sleep 4545"; check "nothing is left after a start timeout" $?

# mpirun across the hosts, no horarun and no HORA_* variable set: the ranks learn rank 0's store
# and the job secret through the launcher's key-value service (PMIx for OpenMPI, PMI-1 over
# PMI_FD for MPICH's Hydra). (Only the test hosts' ssh key is given, as to any ssh.)
python=$(cd "$here/../.." && pwd)/.venv/bin/python
init_py='import os, hora.torch as h; h.init(); os.write(1, f"RANK {h.rank()} {h.size()} {h.local_rank()} {h.local_size()} {h.cross_size()}\n".encode())'
init_ok() {  # 8 ranks, 4 per host, each saw the whole job
  [ "$1" = 0 ] && [ "$(grep -o "RANK [0-9] 8 [0-3] 4 2" "$tmp/out" | sort -u | wc -l)" = 8 ]
}
if command -v mpirun.openmpi >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  on_host 1 timeout 120 mpirun.openmpi -np 4 -H "$h1:2,$h2:2" --mca plm_rsh_args "-i $SSH_KEY" \
    "$bench" allreduce -b 4 -e 2M -f 32 -c 1 >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && ! grep -q "HORA_SECRET is not set" "$tmp/out"
  check "OpenMPI mpirun across hosts, nothing set: allreduce checks clean, secret through PMIx (code $code)" $?
  if [ -x "$python" ]; then
    on_host 1 timeout 180 mpirun.openmpi -np 8 -H "$h1:4,$h2:4" --mca plm_rsh_args "-i $SSH_KEY" \
      "$python" -c "$init_py" >"$tmp/out" 2>&1
    init_ok $?; code=$?
    check "OpenMPI: mpirun -np 8 -H h1:4,h2:4 python -c 'h.init()' with nothing set" $code
    [ "$code" = 0 ] || tail -n 20 "$tmp/out"
  fi
  run --mpi -np 4 -H "$h1:3,$h2:1" --network-interface eth0 "$bench" alltoall -b 4 -e 2M -f 32 -c 1 >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out"; check "horarun --mpi (OpenMPI, -i) across uneven hosts: alltoall checks clean (code $code)" $?
fi
if command -v mpirun.mpich >/dev/null; then
  printf '#!/bin/sh\nexec ssh -i %s -o StrictHostKeyChecking=no -o BatchMode=yes "$@"\n' "$SSH_KEY" >"$tmp/hydra_ssh"
  chmod +x "$tmp/hydra_ssh"
  on_host 1 timeout 120 mpirun.mpich -np 4 -hosts "$h1:2,$h2:2" -launcher ssh -launcher-exec "$tmp/hydra_ssh" \
    "$bench" allreduce -b 4 -e 2M -f 32 -c 1 >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && ! grep -q "HORA_SECRET is not set" "$tmp/out"
  check "MPICH mpirun across hosts, nothing set: allreduce checks clean, secret over PMI-1 (code $code)" $?
  if [ -x "$python" ]; then
    on_host 1 timeout 180 mpirun.mpich -np 8 -hosts "$h1:4,$h2:4" -launcher ssh -launcher-exec "$tmp/hydra_ssh" \
      "$python" -c "$init_py" >"$tmp/out" 2>&1
    init_ok $?; code=$?
    check "MPICH: mpirun -np 8 -hosts h1:4,h2:4 python -c 'h.init()' with nothing set" $code
    [ "$code" = 0 ] || tail -n 20 "$tmp/out"
  fi
  # horarun --mpi with Hydra: its ssh options (-i here) reach Hydra's ssh through a script that
  # is gone when the job ends.
  # (A script, not a link: Hydra finds its proxy beside the mpiexec it was started as.)
  mkdir -p "$tmp/mpich-bin" && printf '#!/bin/sh\nexec mpirun.mpich "$@"\n' >"$tmp/mpich-bin/mpirun"
  chmod +x "$tmp/mpich-bin/mpirun"
  ls -d /tmp/horarun-ssh.* 2>/dev/null | sort >"$tmp/scripts-before"
  on_host 1 env PATH="$tmp/mpich-bin:$PATH" "$horarun" -i "$SSH_KEY" --mpi -np 4 -H "$h1:2,$h2:2" \
    "$bench" allgather -b 4 -e 2M -f 32 -c 1 >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && \
    [ "$(ls -d /tmp/horarun-ssh.* 2>/dev/null | sort)" = "$(cat "$tmp/scripts-before")" ]
  check "horarun --mpi (MPICH, -i) across hosts: allgather checks clean, its ssh script removed (code $code)" $?
fi
# One ssh per remote host, whatever its number of ranks: horarun's host agent forks them there.
run -np 4 -H "$h1:1,$h2:3" sh -c 'exec sleep 4646' >"$tmp/out" 2>&1 &
runner=$!
for _ in $(seq 1 50); do [ "$(hosts_pgrep "sleep 4646" | wc -l)" -ge 4 ] && break; sleep 0.1; done
sshs=$(hosts_pgrep "^ssh .*--host-agent" | wc -l)
agents=$(hosts_pgrep "horarun --host-agent" | wc -l)
pkill -TERM -f "horarun -i $SSH_KEY -np 4 -H $h1:1,$h2:3 sh -c exec sleep 4646"
wait "$runner" 2>/dev/null
[ "$sshs" = 1 ] && [ "$agents" = 1 ]; check "3 ranks on a remote host cost one ssh and one host agent ($sshs, $agents)" $?
no_leftovers "sleep 4646"; check "SIGTERM ends the agent's ranks too" $?
# The host agent's plan carries every rank's environment on stdin: large (3 x 60 KB here, more
# than a pipe holds by default) and odd values arrive intact.
big=$(head -c 60000 /dev/zero | tr '\0' 'x')
odd="a b
c 'q' \"d\" \$HOME é"
run -np 4 -H "$h1:1,$h2:3" -x BIG="$big" -x ODD="$odd" sh -c 'echo "$HORA_RANK ${#BIG} $(printf %s "$ODD" | md5sum)"' \
  >"$tmp/out" 2>&1
want=$(printf %s "$odd" | md5sum)
[ "$(grep -c "<stdout>:[0-3] 60000 $want" "$tmp/out")" = 4 ]
check "a 180 KB host plan with quotes, newlines and unicode in values reaches every remote rank intact" $?
run -np 4 -H "$h1:2,$h2:2" --output-filename "$tmp/logs" sh -c 'echo "out $HORA_RANK"; echo "err $HORA_RANK" >&2' >"$tmp/out" 2>&1
[ "$(cat "$tmp/logs/rank.3/stdout")" = "out 3" ] && [ "$(cat "$tmp/logs/rank.2/stderr")" = "err 2" ] && \
  grep -q '^\[3\]<stdout>:out 3$' "$tmp/out"
check "--output-filename: remote ranks' output reaches DIR/rank.N through their host agent, prefixed on the terminal" $?
run -np 2 -H "$h1:1,$h3:1" hostname >"$tmp/out" 2>&1
grep -q '^\[1\]<stdout>:hora-h3$' "$tmp/out"; check "a remote rank runs on its host (hostname hora-h3)" $?

# hora.run across hosts: a function pickled here runs on both hosts, results in rank order.
if [ -x "$python" ]; then
  on_host 1 env HORA_HORARUN="$horarun" "$python" -c "
import os, hora
print('RESULT', hora.run(lambda: (int(os.environ['HORA_RANK']), os.uname().nodename), np=3,
                         hosts='$h1:1,$h3:2', ssh_identity_file='$SSH_KEY'))" >"$tmp/out" 2>&1
  grep -q "RESULT \[(0, 'hora-h1\|RESULT \[(0, '" "$tmp/out" && grep -q "(1, 'hora-h3'), (2, 'hora-h3')\]" "$tmp/out"
  check "hora.run across hosts returns every rank's result in order" $?
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
