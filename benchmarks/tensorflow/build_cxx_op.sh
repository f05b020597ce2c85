#!/usr/bin/env bash
# Builds cxx_allreduce_op.cc against the TensorFlow of PYTHON (default .venv/bin/python) into OUT:
# the "compiled against the installed TensorFlow" candidate of docs/architecture.md section 10,
# for op_cost.py --cxx-op OUT. Takes a minute or two (TensorFlow's C++ headers).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
out=${1:-/tmp/hora_cxx_allreduce_op.so}
read -r -a cflags <<<"$(TF_CPP_MIN_LOG_LEVEL=3 "$python" -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_compile_flags()))')"
read -r -a lflags <<<"$(TF_CPP_MIN_LOG_LEVEL=3 "$python" -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_link_flags()))')"
g++ -shared -fPIC -O2 "${cflags[@]}" -I "$root/include" "$root/benchmarks/tensorflow/cxx_allreduce_op.cc" \
  -o "$out" "${lflags[@]}"
echo "$out"
