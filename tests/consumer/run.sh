#!/usr/bin/env bash
# usage: run.sh HORA_BUILD_DIR WORK_DIR: installs the build into WORK_DIR/prefix, builds the
# consumer project against it with find_package(hora) and runs it, alone and under horarun.
set -euo pipefail
build=$1 work=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null
env -u HORA_RANK -u HORA_SIZE "$work/build/consumer"
"$work/prefix/bin/horarun" -np 2 "$work/build/consumer"
if [ -x "$work/build/torch_consumer" ]; then
  env -u HORA_RANK -u HORA_SIZE "$work/build/torch_consumer"
  "$work/prefix/bin/horarun" -np 2 "$work/build/torch_consumer"
elif [ -f "$build/src/torch/libhora_torch.so" ]; then
  echo "hora::torch was built but find_package(hora) did not provide it"; exit 1
fi
