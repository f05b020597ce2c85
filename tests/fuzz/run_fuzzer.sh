#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (own build dir) and runs each for a bounded time.
# usage: run_fuzzer.sh BUILD_DIR SECONDS (0: build only)
set -euo pipefail
build=$1 seconds=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHORA_BUILD_FUZZERS=ON -DHORA_BUILD_TESTS=OFF -DHORA_BUILD_BENCHMARKS=OFF >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target store_wire_fuzzer 2>&1 | { grep -E "warning|error" || true; }
[ "${PIPESTATUS[0]}" = 0 ]
[ "$seconds" != 0 ] || exit 0
corpus="$build/corpus/store_wire"
mkdir -p "$corpus"
"$build/tests/store_wire_fuzzer" -max_total_time="$seconds" -print_final_stats=1 "$corpus" 2>&1 | tail -5
