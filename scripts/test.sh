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
  # pytest's short summary, on any rank of a job) are named again at the end.
  local log code
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  code=${PIPESTATUS[0]}
  mapfile -t -O "${#failed_tests[@]}" failed_tests < <(grep -oE '(FAILED|ERROR) tests/[^ ]+' "$log" | sort -u)
  rm -f "$log"
  return "$code"
}
run "release tests" ctest_suite build/release
# The engine's locking as annotated (HORA_GUARDED_BY, ...), checked by clang: seconds.
run "thread-safety annotations" scripts/check_thread_safety.sh
# The longest suite (a third of this script's time): its 30 slowest tests are listed at its end.
run "python tests" pytest_suite .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 tests/python \
  --ignore=tests/python/spark --ignore=tests/python/ray --ignore=tests/python/keras
# (tests/python/keras runs below, on every rank of jobs, once per Keras generation.)

# hora.spark and hora.ray on clusters the tests start and stop: a local-cluster Spark master (its
# workers and executors are JVMs of their own), a Ray head; then both kinds of cluster across
# namespace hosts (needs root: skipped otherwise). Every failure test has its own deadline; the
# timeouts are a backstop. About 3 minutes together.
run "spark and ray tests" pytest_suite timeout 600 .venv/bin/python -m pytest -q -p no:cacheprovider tests/python/spark tests/python/ray
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

sanitized() {  # sanitized DIR SANITIZERS [EXCLUDED]
  local dir=$1 san=$2
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHORA_SANITIZE="$san" \
      -DHORA_BUILD_BENCHMARKS=OFF >/dev/null
  fi
  cmake --build "$dir" -j "$jobs" --target hora_tests 2>&1 | { grep -E "warning|error" || true; }
  [ "${PIPESTATUS[0]}" = 0 ] || return 1
  # The 16 Mi-element cases take minutes under the sanitizers; every other case runs, but those
  # that match $3 (a ctest regex).
  HORA_TEST_LARGE=0 ctest_suite "$dir" -L unit ${3:+-E "$3"}
}
if [ "${HORA_TEST_QUICK:-0}" != 1 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  run "address+undefined sanitizer tests" sanitized build/asan address,undefined
  run "thread sanitizer tests" sanitized build/tsan thread
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
