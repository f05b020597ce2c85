#!/usr/bin/env bash
# horarun and hora-bench end to end: exit codes, failures naming the rank, the secret kept off
# command lines, bad flags, and checked benchmark runs of every collective.
# usage: horarun_test.sh HORARUN HORA_BENCH
set -uo pipefail
horarun=$1 bench=$2
passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$horarun" -np 3 sh -c 'test "$HORA_SIZE" = 3 && test -n "$HORA_SECRET" && echo "r$HORA_RANK"' >"$tmp/out" 2>&1
check "three ranks run with the HORA_* environment" $?
[ "$(sort "$tmp/out" | tr '\n' ' ')" = "[0]<stdout>:r0 [1]<stdout>:r1 [2]<stdout>:r2 " ]
check "each rank has its own HORA_RANK, and its output lines carry its rank" $?

FROM_ENV=passed "$horarun" -np 2 -x GREETING=hello -x FROM_ENV sh -c 'echo "$GREETING $FROM_ENV -x"' >"$tmp/out" 2>&1
[ "$(sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort -u)" = "hello passed -x" ]
check "-x sets and passes variables, and the command keeps its own arguments" $?

# Two ranks writing long lines at once: every line arrives whole, with its prefix.
"$horarun" -np 2 sh -c 'i=0; while [ $i -lt 200 ]; do printf "%05000d\n" $HORA_RANK; i=$((i+1)); done; echo err-$HORA_RANK >&2; printf tail' \
  >"$tmp/out" 2>"$tmp/err"
[ "$(grep -c -E '^\[[01]\]<stdout>:0{4999}[01]$' "$tmp/out")" = 400 ] && [ "$(wc -l <"$tmp/out")" = 402 ]
check "concurrent long lines of two ranks never interleave" $?
grep -q '^\[1\]<stderr>:err-1$' "$tmp/err" && grep -q '^\[0\]<stdout>:tail$' "$tmp/out"
check "stderr keeps its stream and prefix; a last line without newline is forwarded" $?
"$horarun" -np 2 --output-filename "$tmp/logs" sh -c 'echo to-file-$HORA_RANK; echo e >&2' >/dev/null 2>&1
[ "$(cat "$tmp/logs/rank.1/stdout")" = "to-file-1" ] && [ "$(cat "$tmp/logs/rank.0/stderr")" = "e" ]
check "--output-filename writes DIR/rank.N/stdout and stderr" $?

# Carriage-return updates (a progress bar) reach the terminal as they are written, each with
# its rank's prefix and its "\r", while the rank still runs; another rank's line never lands on
# a bar's line; the files of --output-filename get the bytes as written.
for out_dir in "" "$tmp/cr"; do
  rm -f "$tmp/cr_started"
  flags=(); [ -n "$out_dir" ] && flags=(--output-filename "$out_dir")
  "$horarun" -np 2 "${flags[@]}" sh -c 'if [ "$HORA_RANK" = 0 ]; then
      for i in 1 2 3; do printf "\r%d/3 done" $i >&2; sleep 0.4; done; printf "\n" >&2
    else sleep 0.2; echo "rank one line"; fi' >"$tmp/cr_out" 2>&1 &
  job=$!
  sleep 0.7  # the second update has been written, the job still runs
  live=$(tr '\r' '\n' <"$tmp/cr_out" | grep -c '^\[0\]<stderr>:[12]/3 done$')
  wait $job; code=$?
  [ "$code" = 0 ] && [ "$live" -ge 1 ]
  check "progress updates are forwarded as they come ${flags[*]} ($live live, code $code)" $?
  [ "$(tr '\r' '\n' <"$tmp/cr_out" | grep -c '^\[0\]<stderr>:[123]/3 done$')" = 3 ] &&
    grep -q '^\[1\]<stdout>:rank one line$' "$tmp/cr_out"
  check "every update keeps its prefix; another rank's line is a line of its own ${flags[*]}" $?
  if [ -n "$out_dir" ]; then
    printf '\r1/3 done\r2/3 done\r3/3 done\n' >"$tmp/cr_expected"
    cmp -s "$out_dir/rank.0/stderr" "$tmp/cr_expected"
    check "--output-filename keeps the carriage returns as written" $?
  fi
done
# A real tqdm bar (the demo's) in a Python rank: every redraw is a piece of its own, prefixed.
python=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python
if [ -x "$python" ] && "$python" -c 'import tqdm' 2>/dev/null; then
  "$horarun" -np 2 "$python" -c 'import time
from tqdm import tqdm
for _ in tqdm(range(5), mininterval=0, ascii=True): time.sleep(0.05)' >"$tmp/out" 2>&1
  code=$?
  bars=$(tr '\r' '\n' <"$tmp/out" | grep -cE '^\[[01]\]<stderr>: *[0-9]+%\|[# ]*\| [0-5]/5')
  [ "$code" = 0 ] && [ "$bars" -ge 12 ]
  check "a tqdm bar's redraws arrive one by one, each with its rank's prefix ($bars pieces, code $code)" $?
fi
"$horarun" -np 1 --prefix-output-with-timestamp sh -c 'echo stamped' >"$tmp/out" 2>&1
grep -qE '^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}\[0\]<stdout>:stamped$' "$tmp/out"
check "--prefix-output-with-timestamp puts horovodrun's time before the prefix" $?

# The environment reaches every rank: values with spaces, quotes, newlines and unicode intact;
# -x still overrides; a python rank's output is unbuffered (as under horovodrun).
export HORA_ODD_VALUE="a b  'c' \"d\" \$e \\f
second line ünï 漢字"
HORA_ODD_VALUE2=plain "$horarun" -np 2 -x HORA_ODD_VALUE2=overridden sh -c \
  'printf "%s|%s|%s" "$HORA_ODD_VALUE" "$HORA_ODD_VALUE2" "$PYTHONUNBUFFERED" >"'"$tmp"'/env.$HORA_RANK"'
[ "$(cat "$tmp/env.0")" = "$HORA_ODD_VALUE|overridden|1" ] && [ "$(cat "$tmp/env.1")" = "$HORA_ODD_VALUE|overridden|1" ]
check "every rank gets the launcher's environment as it is; -x overrides it" $?
unset HORA_ODD_VALUE

# Note [thread budget]: ranks that share a host share its cores, unless the user chose.
budget=$(( $(nproc) / 2 )); [ "$budget" -ge 1 ] || budget=1
threads() { sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort -u | tr '\n' ' '; }
(unset OMP_NUM_THREADS; "$horarun" -np 2 --verbose sh -c 'echo "${OMP_NUM_THREADS-unset}"' >"$tmp/out" 2>"$tmp/err")
[ "$(threads)" = "$budget " ] && grep -q "horarun: OMP_NUM_THREADS=$budget for each of the 2 workers on this host" "$tmp/err"
check "two ranks on a host get OMP_NUM_THREADS = cores / 2, and --verbose says so" $?
(unset OMP_NUM_THREADS; "$horarun" -np 1 sh -c 'echo "${OMP_NUM_THREADS-unset}"' >"$tmp/out" 2>&1)
[ "$(threads)" = "unset " ]; check "a rank alone on its host keeps the libraries' own thread count" $?
OMP_NUM_THREADS=5 "$horarun" -np 2 sh -c 'echo "$OMP_NUM_THREADS"' >"$tmp/out" 2>&1
[ "$(threads)" = "5 " ]; check "OMP_NUM_THREADS of the shell is kept" $?
(unset OMP_NUM_THREADS; "$horarun" -np 2 -x OMP_NUM_THREADS=3 sh -c 'echo "$OMP_NUM_THREADS"' >"$tmp/out" 2>&1)
[ "$(threads)" = "3 " ]; check "OMP_NUM_THREADS given with -x is kept" $?

# Ranks that disagree on a job-wide knob fail at init, within 2 s, each naming the knob, its
# values and the ranks holding each.
start_ms=$(date +%s%3N)
"$horarun" -np 3 sh -c '[ "$HORA_RANK" = 2 ] && export HORA_CACHE_CAPACITY=0; exec '"$bench"' allreduce -b 4 -e 4 -n 1 -w 0' \
  >"$tmp/out" 2>&1
code=$?
took=$(( $(date +%s%3N) - start_ms ))
named=$(grep -c "rank [0-2]: the ranks disagree on knobs that must be the same on every rank: HORA_CACHE_CAPACITY is '0' on rank 2 but '1024' (the default) on ranks 0-1" "$tmp/out")
[ "$code" != 0 ] && [ "$named" -ge 1 ] && [ "$took" -lt 4000 ]
check "a knob that differs between ranks fails the job at init, named ($named rank(s) said so, $took ms incl. start-up, code $code)" $?
"$horarun" -np 2 sh -c '[ "$HORA_RANK" = 1 ] && export HORA_LOG_LEVEL=error HORA_TIMELINE_ALL_RANKS=0; exec '"$bench"' allreduce -b 4 -e 4 -n 1 -w 0' \
  >"$tmp/out" 2>&1
check "knobs that may differ per rank (log level, timeline) do" $?

"$horarun" -np 3 sh -c 'if [ "$HORA_RANK" = 1 ]; then exit 7; fi; sleep 30' >"$tmp/out" 2>&1
code=$?
[ "$code" = 7 ]; check "a failing rank's exit code is horarun's (got $code)" $?
grep -q "rank 1 on host $(hostname) exited with code 7" "$tmp/out"; check "horarun names the failed rank and its host" $?

start=$SECONDS
"$horarun" -np 2 sh -c 'if [ "$HORA_RANK" = 0 ]; then kill -9 $$; fi; sleep 30' >"$tmp/out" 2>&1
code=$?
[ "$code" = 137 ] && [ $((SECONDS - start)) -lt 10 ]; check "a killed rank stops the job promptly (code $code)" $?
grep -q "rank 0 on host .* was killed by signal 9" "$tmp/out"; check "horarun names the killed rank" $?

"$horarun" -np 2 sh -c 'sleep 30' >"$tmp/out" 2>&1 &
launcher=$!
sleep 0.5
secret_on_cmdline=0
for p in $(pgrep -f 'sleep 30'); do
  tr '\0' ' ' </proc/$p/cmdline | grep -qiE '[0-9a-f]{64}' && secret_on_cmdline=1
done
tr '\0' ' ' </proc/$launcher/cmdline | grep -qiE '[0-9a-f]{64}' && secret_on_cmdline=1
[ "$secret_on_cmdline" = 0 ]; check "the job secret is on no command line" $?
kill -TERM $launcher
wait $launcher
code=$?
[ "$code" = 143 ]; check "SIGTERM to horarun ends the job (code $code)" $?
sleep 0.2
! pgrep -f 'sh -c sleep 30' >/dev/null; check "no worker is left after SIGTERM" $?

# Workers that answer SIGTERM with their own code, or ignore it: the job's code is still the
# signal's, and the ignoring one is killed after --grace-seconds.
"$horarun" -np 2 --grace-seconds 1 sh -c 'if [ "$HORA_RANK" = 0 ]; then trap "exit 7" TERM; else trap "" TERM; fi
  sleep 31 & wait; wait' >"$tmp/out" 2>&1 &
launcher=$!
sleep 0.5
start=$SECONDS
kill -TERM $launcher
wait $launcher
code=$?
[ "$code" = 143 ] && [ $((SECONDS - start)) -le 3 ]
check "SIGTERM: a worker's own exit code or one ignoring it does not change 143 (code $code, $((SECONDS - start)) s)" $?
sleep 0.2
! pgrep -f 'sleep 31' >/dev/null; check "no worker is left after an ignored SIGTERM" $?

"$horarun" -np 0 true >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q -- "-np must be at least 1" "$tmp/out"; check "-np 0 is refused" $?
"$horarun" --bogus -np 1 true >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q "unknown flag --bogus" "$tmp/out"; check "an unknown flag is refused" $?
"$horarun" -np 1 /no/such/program >"$tmp/out" 2>&1; code=$?
[ "$code" = 127 ] && grep -q "cannot execute '/no/such/program'" "$tmp/out"; check "a missing command is named" $?

for op in allreduce allgather broadcast reducescatter alltoall; do
  HORA_TRANSPORT=tcp "$horarun" -np 3 "$bench" "$op" -b 1 -e 1M -f 16 -n 2 -w 1 -c 1 -d float32 \
    --json "$tmp/$op.json" >"$tmp/out" 2>&1
  code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out" && grep -q '"rows"' "$tmp/$op.json"
  check "hora-bench $op on 3 ranks checks clean" $?
done
for t in uint8 int8 int32 int64 float16 bfloat16 float64; do
  "$horarun" -np 2 "$bench" allreduce -b 64 -e 256K -f 64 -n 1 -w 0 -c 1 -d "$t" -o max >"$tmp/out" 2>&1
  check "hora-bench allreduce max $t checks clean" $?
done
"$bench" allreduce -d complex64 >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q "unknown data type 'complex64'" "$tmp/out"; check "hora-bench names a bad -d" $?
HORA_TIMEOUT_SECONDS=soon "$horarun" -np 2 "$bench" allreduce -b 4 -e 4 >"$tmp/out" 2>&1; code=$?
[ "$code" != 0 ] && grep -q "HORA_TIMEOUT_SECONDS='soon'" "$tmp/out"; check "a bad knob value is named" $?

docs=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../docs" && pwd)
"$horarun" --knobs-markdown | diff - "$docs/knobs.md" >"$tmp/out" 2>&1
check "docs/knobs.md is what the knob registry generates (regenerate: horarun --knobs-markdown > docs/knobs.md)" $?
# The README's table of tuning knobs repeats their defaults for readers: they must be the
# registry's ("-" there, no default, reads as a parenthesis in the README).
drift=$(awk -F'|' 'NR == FNR { if ($2 ~ /`HORA_/) registry[$2] = $3; next }
  $2 ~ /`HORA_/ {
    if (!($2 in registry)) { print $2 " is not a knob"; next }
    readme = $3; known = registry[$2]; gsub(/ /, "", readme); gsub(/ /, "", known)
    if (readme != known && !(known == "-" && readme ~ /^\(/)) print $2 ": README " readme ", registry " known
  }' <("$horarun" --knobs-markdown) "$docs/../README.md")
[ -z "$drift" ]; check "the README's knob defaults are the registry's $drift" $?


# Bad input: a clear message naming what is wrong, exit code 2, nothing left running.
expect_refusal() {  # expect_refusal NAME PATTERN horarun-args...
  local name=$1 pattern=$2; shift 2
  "$horarun" "$@" >"$tmp/out" 2>&1; local code=$?
  [ "$code" = 2 ] && grep -q -- "$pattern" "$tmp/out"; check "$name (code $code)" $?
}
expect_refusal "an unknown flag is named" "--frobnicate" --frobnicate -np 2 true
expect_refusal "-np 0 is refused" "at least 1" -np 0 true
expect_refusal "-np -3 is refused" "at least 1" -np -3 true
expect_refusal "more ranks than slots is refused" "more ranks than the 3 slots" -np 4 -H localhost:3 true
expect_refusal "a malformed -H entry is named" "slots must be a positive integer" -np 2 -H 'localhost:x' true
expect_refusal "a host listed twice is refused" "listed twice" -np 2 -H localhost:1,localhost:1 true
printf 'localhost slots=2\nbad line here\n' >"$tmp/hosts"
expect_refusal "a malformed hostfile line is named with its number" "hosts line 2" -np 2 --hostfile "$tmp/hosts" true
expect_refusal "an unresolvable host is named" "host 'no-such-host.invalid'" -np 2 -H localhost:1,no-such-host.invalid:1 true
"$horarun" -np 2 no-such-command-hora >"$tmp/out" 2>&1; code=$?
[ "$code" = 127 ] && grep -q "cannot execute 'no-such-command-hora'" "$tmp/out"; check "a command that is not found is named (code $code)" $?

printf '# two local slots\nlocalhost slots=1\n127.0.0.1:2\n' >"$tmp/hosts"
"$horarun" -np 3 --hostfile "$tmp/hosts" sh -c 'echo "$HORA_RANK $HORA_HOSTNAME $HORA_LOCAL_RANK/$HORA_LOCAL_SIZE $HORA_CROSS_RANK/$HORA_CROSS_SIZE"' >"$tmp/out" 2>&1
[ "$(sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort | tr '\n' ';')" = "0 localhost 0/1 0/2;1 127.0.0.1 0/2 1/2;2 127.0.0.1 1/2 0/1;" ]
check "a hostfile fills hosts in order, with local and cross ranks" $?
"$horarun" -np 3 --hostfile "$tmp/hosts" sh -c 'echo "$HOROVOD_RANK $HOROVOD_HOSTNAME $HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE $HOROVOD_CROSS_RANK/$HOROVOD_CROSS_SIZE $HOROVOD_SIZE"' >"$tmp/out" 2>&1
[ "$(sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort | tr '\n' ';')" = "0 localhost 0/1 0/2 3;1 127.0.0.1 0/2 1/2 3;2 127.0.0.1 1/2 0/1 3;" ]
check "every rank has its identity under horovodrun's HOROVOD_* names too" $?

start=$SECONDS
"$horarun" -np 2 --start-timeout 2 sh -c 'if [ "$HORA_RANK" = 1 ]; then sleep 30; else '"$bench"' allreduce -b 4 -e 4 -n 1 -w 0; fi' >"$tmp/out" 2>&1
code=$?
[ "$code" != 0 ] && [ $((SECONDS - start)) -lt 15 ] && grep -q "rank 1 on host .* did not reach the rendezvous store within --start-timeout 2 s" "$tmp/out"
check "a rank that never reaches the rendezvous fails the job in time, named with its host (code $code)" $?
sleep 0.5
! pgrep -f "sleep 30" >/dev/null; check "no worker is left after a start timeout" $?

"$horarun" --check-build | grep -q "tcp.*\[x\] shared memory"; check "--check-build lists the transports" $?
"$horarun" --check-build | grep -qE "\[[x ]\] PyTorch \(hora.torch\) +\[[x ]\] libtorch" &&
  "$horarun" -cb | grep -q "mpirun (--mpi)"
check "--check-build (-cb) says which frontends this build has and that --mpi is there" $?
"$horarun" -np 1 --timeline-filename /tmp/x.json --cycle-time-ms 2 --fusion-threshold-mb 1 --cache-capacity 8 --no-stall-check --log-level error \
  sh -c 'echo "$HORA_TIMELINE $HORA_CYCLE_TIME $HORA_FUSION_THRESHOLD $HORA_CACHE_CAPACITY $HORA_STALL_CHECK_TIME_SECONDS $HORA_LOG_LEVEL"' >"$tmp/out" 2>&1
grep -q "/tmp/x.json 2.000000 1048576 8 0 error" "$tmp/out"; check "knob flags set their HORA_* variables" $?
"$horarun" -np 2 --knob HORA_SPIN_MICROSECONDS=7 --knob HOROVOD_CYCLE_TIME=3 \
  sh -c 'echo "$HORA_SPIN_MICROSECONDS $HORA_CYCLE_TIME $HOROVOD_CYCLE_TIME."' >"$tmp/out" 2>&1
[ "$(sed 's/^\[[0-9]\]<stdout>://' "$tmp/out" | sort | uniq -c | tr -s ' ')" = " 2 7 3 ." ]
check "--knob NAME=VALUE (or its HOROVOD_* alias) reaches every rank as its HORA_* variable" $?
# Two host names of this machine: to hora two hosts, which shared memory alone cannot join.
"$horarun" -np 2 -H localhost:1,127.0.0.1:1 --knob HORA_TRANSPORT=shm "$bench" allreduce -b 4 -e 4 -n 1 -w 0 >"$tmp/out" 2>&1
code=$?
[ "$code" != 0 ] && grep -q "HORA_TRANSPORT=shm: the 2 ranks span 2 hosts" "$tmp/out"
check "a --knob value is the ranks' configuration (code $code)" $?
expect_refusal "--knob refuses a name the registry does not hold, naming it" "--knob HORA_NO_SUCH_KNOB: no such knob" \
  --knob HORA_NO_SUCH_KNOB=1 -np 1 true
expect_refusal "--knob refuses a variable horarun sets per rank, naming it" "--knob HORA_RANK: horarun sets it" \
  --knob HORA_RANK=1 -np 1 true
expect_refusal "--knob refuses a value the ranks would refuse, naming it" "HORA_TRANSPORT='pigeon'" \
  --knob HORA_TRANSPORT=pigeon -np 1 true
expect_refusal "a knob set twice is refused" "HORA_CYCLE_TIME is set twice" --cycle-time-ms 2 --knob HORA_CYCLE_TIME=3 -np 1 true
"$horarun" --help >"$tmp/out" 2>&1
grep -q -- "--knob" "$tmp/out" && grep -q "docs/knobs.md" "$tmp/out"; check "--help lists --knob and points to docs/knobs.md" $?

for n in 1 2 3 4 5 6 7 8; do
  "$horarun" -np $n "$bench" allreduce -b 4 -e 64K -f 64 -c 1 -n 2 -w 1 >"$tmp/out" 2>&1; code=$?
  [ "$code" = 0 ] && grep -q "Out of bounds values : 0 OK" "$tmp/out"; check "horarun -np $n: a checked allreduce (code $code)" $?
done

# SIGKILL to horarun while 4 ranks stream shared-memory allreduces: the workers die with it
# (PR_SET_PDEATHSIG) and /dev/shm holds nothing of hora (segments are unlinked once mapped).
# Segments are named /hora.<pid>.<n>: only the workers' count (other tests may run beside).
"$horarun" -np 4 "$bench" allreduce -b 16M -e 16M -n 100000 -w 0 -c 0 >"$tmp/out" 2>&1 &
launcher=$!
sleep 2
workers=$(pgrep -f "allreduce -b 16M -e 16M -n 100000" | grep -v "^$launcher\$" | paste -sd'|')
kill -9 $launcher
wait $launcher 2>/dev/null
for i in $(seq 1 50); do pgrep -f "allreduce -b 16M -e 16M -n 100000" >/dev/null || break; sleep 0.1; done
! pgrep -f "allreduce -b 16M -e 16M -n 100000" >/dev/null; check "SIGKILL to horarun: no worker is left" $?
[ -n "$workers" ] && [ "$(ls /dev/shm | grep -cE "^hora\.($workers)\." || true)" = 0 ]
check "SIGKILL to horarun during shared-memory allreduces: nothing of hora is left in /dev/shm" $?

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
