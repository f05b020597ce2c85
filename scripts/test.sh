#!/usr/bin/env bash
# Runs every test: the Release suite, the same suite under AddressSanitizer+UBSan and under
# ThreadSanitizer, and the store's request fuzzer for a bounded time. Exits non-zero on any
# failure. HORA_TEST_QUICK=1 skips the sanitizer builds (for a fast local loop).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh

failed=()
run() {  # run NAME COMMAND...: records a failure instead of stopping, so every suite reports
  local name=$1; shift
  echo "=== $name"
  local start=$SECONDS
  if "$@"; then echo "=== $name: passed ($((SECONDS - start)) s)"; else echo "=== $name: FAILED ($((SECONDS - start)) s)"; failed+=("$name"); fi
}

jobs=$(nproc)
flaky=() failed_tests=()
ctest_suite() {  # ctest_suite DIR ARGS...: a test that fails is run once more. A test that fails
  # twice fails the suite; one that passes on its second run is listed at the end as flaky, so
  # that a timing-sensitive test is seen without costing a whole run. Failures are named at the
  # end too, where a truncated log still shows them.
  local dir=$1; shift
  local log="$dir/ctest-output.log" code=0
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$jobs" --timeout 900 \
    --repeat until-pass:2 "$@" 2>&1 | tee "$log" || code=$?
  local name
  while read -r name; do
    if grep -qE "Test +#[0-9]+: $name .*Passed" "$log"; then flaky+=("$name ($dir)"); fi
  done < <(grep -oE "Test +#[0-9]+: [^ ]+ .*\*\*\*(Failed|Timeout|Exception)" "$log" \
             | sed -E 's/Test +#[0-9]+: ([^ ]+) .*/\1/' | sort -u)
  if [ $code != 0 ]; then
    mapfile -t -O "${#failed_tests[@]}" failed_tests < <(sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ')
  fi
  return $code
}
pytest_suite() {  # pytest_suite COMMAND...: runs a pytest command; the tests that failed (from
  # pytest's short summary, on any rank of a job) are named again at the end, each with the start
  # of its error, where a truncated log still shows why. Under $rerun_once, a test that failed and
  # then passed is listed as flaky.
  local log code name
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  code=${PIPESTATUS[0]}
  mapfile -t -O "${#failed_tests[@]}" failed_tests < <(grep -oE '(FAILED|ERROR) tests/.*' "$log" | cut -c1-500 | sort -u)
  while read -r name; do  # (test ids hold brackets: compared as whole fixed strings)
    grep -oE '(FAILED|ERROR) tests/[^ ]+' "$log" | sed -E 's/^[A-Z]+ //' | grep -qxF "$name" || flaky+=("$name (pytest)")
  done < <(grep -oE '^RERUN tests/[^ ]+' "$log" | sed 's/^RERUN //' | sort -u)
  rm -f "$log"
  return "$code"
}
# The sanitizer and fuzzer builds compile while the suites run, at idle CPU priority (SCHED_IDLE):
# they get only the cycles the tests leave (the jobs' ranks often wait on each other, on sockets
# and on deadlines), and a test's process that wakes takes its core back at once. Their logs and
# exit codes go to build/logs; the stages at the end wait for them.
# Line tables: enough for the reports' file:line, and quick to build. GCC 12 at -O1 with the
# sanitizers warns of a maybe-uninitialized std::function inside libstdc++'s <regex> (a false
# positive the Release build, which would warn of a real one, does not show).
sanitizer_flags="-O1 -g1 -DNDEBUG -Wno-maybe-uninitialized"
build_sanitized() {  # build_sanitized DIR SANITIZERS
  if [ ! -f "$1/CMakeCache.txt" ]; then
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$sanitizer_flags" \
      -DHORA_SANITIZE="$2" -DHORA_BUILD_BENCHMARKS=OFF >/dev/null
  fi
  cmake --build "$1" -j "$jobs" --target hora_tests
}
in_background() {  # in_background NAME COMMAND...: NAME's output and exit code into build/logs
  local code=0
  "${@:2}" > "build/logs/$1.log" 2>&1 || code=$?
  echo $code > "build/logs/$1.rc"
}
if [ "${HORA_TEST_QUICK:-0}" != 1 ]; then
  mkdir -p build/logs
  rm -f build/logs/{asan,tsan,fuzz}.{log,rc}
  (
    chrt --idle -p 0 $BASHPID 2>/dev/null || renice -n 19 $BASHPID >/dev/null || true  # before any child
    in_background asan build_sanitized build/asan address,undefined
    in_background tsan build_sanitized build/tsan thread
    in_background fuzz tests/fuzz/run_fuzzer.sh build/fuzz 0
  ) &
  background_builds=$!
fi
run "release tests" ctest_suite build/release
# The engine's locking as annotated (HORA_GUARDED_BY, ...), checked by clang: seconds.
run "thread-safety annotations" scripts/check_thread_safety.sh
# The longest suite (a third of this script's time): its 30 slowest tests are listed at its end.
# A one-process suite runs a failed test once more (a job's ranks cannot: they would fall out of step).
rerun_once=(--reruns 1 -rfER)
run "python tests" pytest_suite .venv/bin/python -m pytest -q -p no:cacheprovider "${rerun_once[@]}" --durations=30 tests/python \
  --ignore=tests/python/spark --ignore=tests/python/ray --ignore=tests/python/keras
# (tests/python/keras runs below, on every rank of jobs, once per Keras generation.)

# hora.spark and hora.ray on clusters the tests start and stop: a local-cluster Spark master (its
# workers and executors are JVMs of their own), a Ray head; then both kinds of cluster across
# namespace hosts (needs root: skipped otherwise). Every failure test has its own deadline; the
# timeouts are a backstop. About 3 minutes together.
run "spark and ray tests" pytest_suite timeout 900 .venv/bin/python -m pytest -q -p no:cacheprovider "${rerun_once[@]}" \
  tests/python/spark tests/python/ray
skippable() {  # a test that exits 77 when the machine cannot run it
  "$@"
  local code=$?
  if [ $code = 77 ]; then echo "(skipped)"; return 0; fi
  if [ $code != 0 ]; then
    mapfile -t -O "${#failed_tests[@]}" failed_tests < <(sed -n '/The following tests FAILED/,$p' "$log" | grep -E '^[[:space:]]+[0-9]+ - ')
  fi
  return $code
}
run "spark and ray across namespace hosts" skippable timeout 600 tests/integration/spark_ray_multihost_test.sh
# hora.torch on every rank of real jobs; a rank that falls out of step fails in 30 s, not hangs.
for np in 2 3; do
  run "python tests under horarun -np $np" pytest_suite .venv/bin/horarun -np "$np" -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/distributed
done
# Join's bookkeeping depends on the world size (odd sizes round a mean, joined ranks skip names).
for np in 4 5; do
  run "join tests under horarun -np $np" pytest_suite .venv/bin/horarun -np "$np" -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/distributed/test_join.py
done
# hora.tensorflow: one build of its op library under both TensorFlow generations that setup.sh
# installs, TensorFlow 2.15 (.venv) at 1, 2 and 3 ranks and the newest (.venv-tf2) at 2.
for np in 1 2 3; do
  run "tensorflow tests (.venv) under horarun -np $np" pytest_suite .venv/bin/horarun -np "$np" \
    -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 .venv/bin/python -m pytest -q -p no:cacheprovider tests/tensorflow
done
run "tensorflow tests (.venv-tf2) under horarun -np 2" pytest_suite .venv/bin/horarun -np 2 -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 \
  .venv-tf2/bin/python -m pytest -q -p no:cacheprovider tests/tensorflow
# hora.tensorflow.keras and hora.keras in model.fit on every rank of a 2-rank job, under each Keras
# generation: Keras 2 (.venv, TensorFlow 2.15) and Keras 3 (.venv-tf2, the newest TensorFlow);
# then Keras 2 beside Keras 3 on the newest TensorFlow (tf.keras is tf_keras, keras stays 3).
for venv in .venv .venv-tf2; do
  run "keras tests ($venv) under horarun -np 2" pytest_suite timeout -k 10 900 .venv/bin/horarun -np 2 \
    -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 $venv/bin/python -m pytest -q -p no:cacheprovider tests/python/keras
done
run "keras tests (.venv-tf2, TF_USE_LEGACY_KERAS=1) under horarun -np 2" pytest_suite timeout -k 10 900 \
  .venv/bin/horarun -np 2 -x HORA_STALL_SHUTDOWN_TIME_SECONDS=30 -x TF_USE_LEGACY_KERAS=1 \
  .venv-tf2/bin/python -m pytest -q -p no:cacheprovider tests/python/keras

builds_done() {  # waits for the background builds; their warnings and errors, and whether all built
  wait "$background_builds" || true
  local name ok=0
  for name in asan tsan fuzz; do
    grep -E "warning|error" "build/logs/$name.log" || true
    [ "$(cat "build/logs/$name.rc" 2>/dev/null)" = 0 ] || { echo "$name: its build failed:"; tail -20 "build/logs/$name.log"; ok=1; }
  done
  return $ok
}
sanitized() {  # sanitized DIR [EXCLUDED]: DIR's unit tests, if it built
  [ "$(cat "build/logs/$(basename "$1").rc")" = 0 ] || return 1
  # The 16 Mi-element cases take minutes under the sanitizers; every other case runs, but those
  # that match $2 (a ctest regex).
  HORA_TEST_LARGE=0 ctest_suite "$1" -L unit ${2:+-E "$2"}
}
if [ "${HORA_TEST_QUICK:-0}" != 1 ]; then
  run "sanitizer and fuzzer builds (begun beside the tests: the time left to wait)" builds_done
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  run "address+undefined sanitizer tests" sanitized build/asan
  run "thread sanitizer tests" sanitized build/tsan
  run "store request fuzzer (60 s)" tests/fuzz/run_fuzzer.sh build/fuzz 60
fi

if ((${#flaky[@]})); then
  echo "FLAKY (failed once, passed when run again):"
  printf '  %s\n' "${flaky[@]}"
fi
if ((${#failed[@]})); then
  if ((${#failed_tests[@]})); then echo "tests that failed (ctest: twice):"; printf '%s\n' "${failed_tests[@]}"; fi
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all test suites passed"
