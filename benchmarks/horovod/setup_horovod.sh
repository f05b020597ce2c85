#!/usr/bin/env bash
# Builds Horovod 0.28.1 from its PyPI source distribution into a virtual environment of its own,
# apart from hora's .venv, for benchmarks/horovod/side_by_side.py. Not part of setup.sh nor of CI.
#
#   benchmarks/horovod/setup_horovod.sh [DIR]     (DIR defaults to ~/.cache/hora-bench)
#
# DIR/horovod-venv: made from Debian's python with the system site packages (Debian's torch 1.13
# and numpy 1.24), plus tensorflow-cpu 2.15.1 from PyPI, as hora's .venv has.
# DIR/horovod-0.28.1: the unpacked sdist, built in place so that a second attempt (here: without
# TensorFlow, when the build with it fails) reuses the objects already compiled; the examples
# the side-by-side runs take (examples/pytorch/...) are read from here.
# DIR/build-*.log: the build logs; DIR/build.txt: what was built, and how long it took.
# Run it niced (`nice -n 19 benchmarks/horovod/setup_horovod.sh`): it compiles for a long time.
set -euo pipefail
dir=${1:-$HOME/.cache/hora-bench}
version=0.28.1
tf_pin=tensorflow-cpu==2.15.1
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
venv=$dir/horovod-venv
src=$dir/horovod-$version

# Horovod's own needs beyond hora's setup.sh: none from Debian (cmake, g++, OpenMPI's headers and
# mpirun, python3-dev and Debian's torch are already there). Checked, not installed.
for p in cmake g++ libopenmpi-dev openmpi-bin python3-dev python3-torch; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || { echo "setup_horovod: Debian package $p is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c 'import tensorflow' 2>/dev/null; then
  "$venv/bin/pip" install -q "$tf_pin"
fi

if [ ! -f "$src/setup.py" ]; then
  "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$dir" "horovod==$version"
  tar -xzf "$dir/horovod-$version.tar.gz" -C "$dir"
fi

if "$venv/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  echo "setup_horovod: horovod $version already in $venv"
  "$venv/bin/horovodrun" --check-build
  exit 0
fi

# build WITH_TF LOG: pip-installs the unpacked source in place (no build isolation, so that the
# build sees Debian's torch and the venv's TensorFlow), with gloo and MPI, CPU collectives on gloo.
build() {
  local with_tf=$1 log=$2
  local tf_flag=HOROVOD_WITHOUT_TENSORFLOW=1
  [ "$with_tf" = 1 ] && tf_flag=HOROVOD_WITH_TENSORFLOW=1
  env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_CPU_OPERATIONS=gloo "$tf_flag" MAKEFLAGS="-j$(nproc)" \
    "$venv/bin/pip" install -v --no-build-isolation "$src" >"$log" 2>&1
}

start=$(date +%s)
if build 1 "$dir/build-with-tf.log"; then
  echo "built with TensorFlow in $(($(date +%s) - start)) s" | tee "$dir/build.txt"
else
  echo "setup_horovod: the build with TensorFlow failed; first errors:" | tee "$dir/build.txt"
  grep -m 20 -E "error|Error" "$dir/build-with-tf.log" | tee -a "$dir/build.txt"
  mid=$(date +%s)
  echo "with TensorFlow: failed after $((mid - start)) s" | tee -a "$dir/build.txt"
  build 0 "$dir/build-without-tf.log"
  echo "without TensorFlow: built in $(($(date +%s) - mid)) s" | tee -a "$dir/build.txt"
fi
"$venv/bin/horovodrun" --check-build
