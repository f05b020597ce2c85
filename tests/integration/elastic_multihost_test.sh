#!/usr/bin/env bash
# horarun's elastic mode across real hosts: network namespaces with their own sshd
# (netns_hosts.sh), horarun on host 1, remote workers started over ssh through the host agent.
# The training program is tests/python/elastic/elastic_train.py: rank 0 logs every committed
# sample, so each case checks that each sample of each epoch was trained on exactly once across
# the resets, that the ranks end with identical parameters, and that the output's [rank] prefixes
# follow the generations (the step lines carry the rank the program itself saw).
#   - a whole host is SIGKILLed (its sshd, host agent and workers): the others go on, smaller;
#   - a host's link is cut (ip link set ... down): the others declare it dead, go on without it, and
#     its workers are stopped;
#   - a discovery script adds a remote host while the job runs on host 1 only: it grows;
#   - a whole host is SIGSTOPped (frozen: its connections stay open and silent): the others declare it
#     dead, go on without it, and it is blacklisted.
# usage: elastic_multihost_test.sh HORARUN        (exit 77: skipped, with the reason)
set -uo pipefail
horarun=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
python=$(cd "$here/../.." && pwd)/.venv/bin/python
train="$here/../python/elastic/elastic_train.py"
# shellcheck source=netns_hosts.sh
. "$here/netns_hosts.sh"
hosts_available || { [ "${HORA_REQUIRE_MULTIHOST:-0}" = 1 ] && exit 1; exit 77; }
[ -x "$python" ] && "$python" -c 'import hora.torch' 2>/dev/null || { echo "SKIP: no .venv with hora.torch"; exit 77; }
hosts_up 4 || exit 1
kill_host() {  # every process of host $1 (its network namespace): the host is gone
  ip netns pids "${HOST_NS[$1]}" | xargs -r kill -KILL
}
cleanup() {
  local i
  for i in $(seq 1 "${HOSTS_N:-0}"); do ip link set "hv${HOSTS_ID}h$i" up 2>/dev/null; kill_host "$i" 2>/dev/null; done
  hosts_down
}
trap cleanup EXIT  # (replaces hosts_up's)
passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp="$HOSTS_DIR/work"
mkdir -p "$tmp"
cd "$tmp" || exit 1
h1=${HOST_IP[1]} h2=${HOST_IP[2]} h3=${HOST_IP[3]} h4=${HOST_IP[4]}
step_re='^\[([0-9]+)\]<stdout>:step [0-9.]+ gen=([0-9]+) rank=([0-9]+) size=([0-9]+) pid=([0-9]+) step=([0-9]+)'

# start_job NAME HORARUN-ARGS... -- TRAIN-ARGS...: horarun on host 1, in the background
start_job() {
  local name=$1; shift
  local hargs=() targs=()
  while [ "$1" != -- ]; do hargs+=("$1"); shift; done
  shift; targs=("$@")
  out="$tmp/$name.out" log="$tmp/$name.log"
  rm -f "$log"
  : >"$out"
  on_host 1 timeout 300 "$horarun" -i "$SSH_KEY" "${hargs[@]}" "$python" "$train" --log "$log" "${targs[@]}" \
    >"$out" 2>&1 &
  job=$!
}
# wait_line REGEX SECONDS: until the job's output has a line matching REGEX (extended); fails
# at once when the job ends first
wait_line() {
  local i
  for i in $(seq 1 $(( $2 * 5 ))); do
    grep -E -q "$1" "$out" && return 0
    kill -0 "$job" 2>/dev/null || return 1  # the job ended first
    sleep 0.2
  done
  return 1
}
# each_sample_once SAMPLES EPOCHS: the committed log holds every (epoch, sample) exactly once
each_sample_once() {
  [ -f "$log" ] && [ "$(sort "$log" | uniq -d | wc -l)" = 0 ] &&
    [ "$(sort -u "$log" | wc -l)" = $(( $1 * $2 )) ] && [ "$(wc -l <"$log")" = $(( $1 * $2 )) ]
}
# prefixes_follow_ranks: every step line's [prefix] is the rank the program printed
prefixes_follow_ranks() {
  sed -E -n "s/$step_re.*/\1 \3/p" "$out" | awk '$1 != $2 { bad = 1 } END { exit bad }'
}
# since_ms START_MS SIZE: ms from START_MS (epoch ms) to the first step line at SIZE ranks
since_ms() {
  local t
  t=$(grep -E "<stdout>:step .* size=$2 " "$out" | head -1 | sed -E 's/.*:step ([0-9.]+) .*/\1/')
  [ -n "$t" ] && awk -v t="$t" -v s="$1" 'BEGIN { printf "%d", t * 1000 - s }'
}
finish() {  # the job's exit code
  wait "$job"
}

# 1. SIGKILL a whole host: 2 ranks on each of 2 hosts, host 2 goes.
start_job kill_host -np 4 --min-np 2 -H "$h1:2,$h2:2" -- --samples 240 --epochs 2 --step-sleep 0.1
if wait_line "<stdout>:step .* gen=0 rank=3 size=4 .* step=6$" 120; then
  killed_ms=$(date +%s%3N)
  kill_host 2
  finish; code=$?
  echo "from the host's SIGKILL to the first step at 2 ranks: $(since_ms "$killed_ms" 2) ms"
  grep -q "horarun: generation 1: 2 rank(s)" "$out" && grep -E -q "<stdout>:step .* size=2 " "$out" &&
    grep -E -q "horarun: host $h2 is blacklisted for good: worker $h2:[01] \(its host's ssh and host agent\) (exited|was killed)" "$out" &&
    [ "$code" = 0 ] && [ "$(grep -c "identical=True" "$out")" = 2 ] && each_sample_once 240 2 && prefixes_follow_ranks
  check "a SIGKILLed host: the other host's 2 ranks go on from the last commit, every sample once (code $code)" $?
  [ "$code" = 0 ] || tail -n 30 "$out"
else
  kill "$job"; finish; check "a SIGKILLed host: the job started at 4 ranks on 2 hosts" 1; tail -n 30 "$out"
fi

# silent_host NAME HOST RANK WHAT COMMAND...: a job on hosts 1, 3 and 4 (one rank each); COMMAND
# makes host HOST (rank RANK) silent without closing anything; the others declare it dead after
# HORA_HEARTBEAT_TIMEOUT_SECONDS (or time out in a collective), re-join, and horarun leaves HOST
# behind at once (a peer's verdict) or once the join window has passed.
silent_host() {
  local name=$1 host=$2 rank=$3 what=$4 ip; shift 4
  ip=${HOST_IP[$host]}
  start_job "$name" -np 3 --min-np 1 -H "$h1:1,$h3:1,$h4:1" --grace-seconds 1 -x HORA_TIMEOUT_SECONDS=3 \
    -- --samples 240 --epochs 2 --step-sleep 0.1
  if wait_line "<stdout>:step .* gen=0 rank=2 size=3 .* step=6$" 120; then
    local start_ms
    start_ms=$(date +%s%3N)
    "$@"
    finish; code=$?
    echo "$what: $(since_ms "$start_ms" 2) ms to the first step at 2 ranks (HORA_HEARTBEAT_TIMEOUT_SECONDS 3)"
    grep -q "horarun: generation 1: 2 rank(s)" "$out" && [ "$code" = 0 ] &&
      grep -E -q "horarun: host $ip is blacklisted for good: worker $ip:0 \(rank $rank of generation 0\) (did not ask to join|was declared dead by its peers: rank $rank .* sent no heartbeat)" "$out" &&
      [ "$(grep -c "identical=True" "$out")" = 2 ] && each_sample_once 240 2 && prefixes_follow_ranks
    check "$what: the 2 other hosts go on without it, every sample once (code $code)" $?
    [ "$code" = 0 ] || tail -n 30 "$out"
  else
    kill "$job"; finish; check "$what: the job started at 3 ranks on 3 hosts" 1; tail -n 30 "$out"
  fi
}

# 2. Cut a host's link: its rank is silent, not gone.
silent_host cut_link 4 2 "a cut link" ip link set "hv${HOSTS_ID}h4" down
ip link set "hv${HOSTS_ID}h4" up

# 3. Discovery adds a remote host to a job that runs on host 1 only: the store must be reachable
# from a host that was not known when horarun started.
echo "$h1:1" >"$tmp/hosts"
start_job discovered --min-np 1 --host-discovery-script "cat $tmp/hosts" -- --samples 400 --epochs 2 --step-sleep 0.05
if wait_line "<stdout>:step .* size=1 " 120; then
  echo "$h1:1
$h3:1" >"$tmp/hosts"
  added_ms=$(date +%s%3N)
  finish; code=$?
  echo "from the discovery file's change to the first step at 2 ranks: $(since_ms "$added_ms" 2) ms"
  grep -E -q "^\[1\]<stdout>:step .* rank=1 size=2 " "$out" && [ "$code" = 0 ] &&
    [ "$(grep -c "identical=True" "$out")" = 2 ] && each_sample_once 400 2 && prefixes_follow_ranks
  check "discovery adds a remote host: the job grows to 2 ranks across hosts, every sample once (code $code)" $?
  [ "$code" = 0 ] || tail -n 30 "$out"
else
  kill "$job"; finish; check "discovery: the job started at 1 rank" 1; tail -n 30 "$out"
fi

# 4. Freeze a host (SIGSTOP every process in it, sshd included): nothing closes, nothing answers.
freeze_host() { ip netns pids "${HOST_NS[$1]}" | xargs -r kill -STOP; }
silent_host frozen 3 1 "a frozen host" freeze_host 3
kill_host 3

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
