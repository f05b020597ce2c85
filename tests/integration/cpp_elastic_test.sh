#!/usr/bin/env bash
# usage: cpp_elastic_test.sh HORARUN ELASTIC_TRAIN: the C++ elastic example (examples/cpp/
# elastic_train.cpp) under horarun's elastic mode keeps training across a SIGKILL: 3 workers on
# two hosts (127.0.0.1 and 127.0.0.2), the one on 127.0.0.2 is killed mid-training; the two
# others restore their last commit, re-form at size 2, finish every step and end with identical
# parameters and a small loss. Prints the time from the kill to the first step at size 2.
set -euo pipefail
horarun=$1 example=$2
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; tail -30 "$work/out.log"; exit 1; }
now() { date +%s.%N; }

"$horarun" -np 3 --min-np 2 --elastic-timeout 60 -H 127.0.0.1:2,127.0.0.2:1 \
  "$example" --steps 200 --commit-every 5 --step-sleep 0.02 >"$work/out.log" 2>&1 &
pid=$!
# The worker of 127.0.0.2 is rank 2 of generation 0; kill it once it has trained a while.
victim=
for _ in $(seq 600); do
  victim=$(grep -oE "^\[2\]<stdout>:step 20 gen=0 rank=2 size=3 pid=[0-9]+" "$work/out.log" | grep -oE "[0-9]+$" || true)
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] || fail "rank 2 did not reach step 20"
kill -9 "$victim"
killed=$(now)
first=
for _ in $(seq 600); do
  if grep -qE "^\[[01]\]<stdout>:step [0-9]+ gen=[1-9][0-9]* rank=[01] size=2 " "$work/out.log"; then first=$(now); break; fi
  sleep 0.05
done
[ -n "$first" ] || fail "no step at size 2 after the kill"
code=0
wait "$pid" || code=$?
pid=
[ "$code" = 0 ] || fail "horarun exited with $code"
[ "$(grep -cE "<stdout>:done rank=[01] size=2 loss=0\.00[0-9]+ identical=yes" "$work/out.log")" = 2 ] ||
  fail "the two survivors did not end with identical parameters and a loss below 0.01"
# Both restore the same commit (commits are every 5 steps), from after step 20 at the latest.
resets=$(grep -oE "<stdout>:reset to step [0-9]+ after: " "$work/out.log" | grep -oE "[0-9]+" | sort -u)
[ "$(grep -cE "<stdout>:reset to step [0-9]+ after: " "$work/out.log")" = 2 ] && [ "$(echo "$resets" | wc -l)" = 1 ] &&
  [ $((resets % 5)) = 0 ] && [ "$resets" -ge 15 ] || fail "the survivors did not both restore one commit: $resets"
grep -qE "<stdout>:step 200 gen=[1-9][0-9]* rank=0 size=2 " "$work/out.log" || fail "step 200 was not trained at size 2"
echo "PASS: the C++ elastic example went on at size 2 after a SIGKILL; from the kill to the first step at size 2: $(awk -v a="$killed" -v b="$first" 'BEGIN { printf "%.2f", b - a }') s"
