#!/usr/bin/env bash
# Installs what hora needs from Debian (only what is missing), makes .venv from Debian's python
# with the system site packages, installs TensorFlow into it (and the newest TensorFlow into
# .venv-tf2), builds hora in Release and installs it into both, so that
# `source .venv/bin/activate` puts horarun and hora-bench on PATH. Idempotent and quiet when
# there is nothing to do.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

packages=(
  # build
  cmake make g++ pkg-config
  # libraries of the core, the launcher and the benchmarks
  libssl-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev
  # tests: GoogleTest, clang for the libFuzzer target, iproute2 for the namespace tests
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev iproute2 procps
  # multi-host tests: hosts are network namespaces, each with its own sshd; MPICH for mpirun tests
  openssh-server openssh-client mpich libmpich-dev
  # mpirun jobs of OpenMPI find rank 0 through PMIx (its headers); a real Slurm in the tests
  libpmix-dev slurm-wlm munge
  # python side and the comparison benchmarks (OpenMPI, torch.distributed with gloo)
  python3 python3-venv python3-pip python3-setuptools python3-numpy python3-matplotlib python3-torch
  python3-cloudpickle python3-pytest python3-dev pybind11-dev python3-tqdm python3-scipy
  python3-torchvision python3-filelock python3-packaging
  # the C++ frontend and its example: libtorch, zlib for the gzipped data set, the data set
  libtorch-dev zlib1g-dev dataset-fashion-mnist
  libopenmpi-dev openmpi-bin
  # hora.spark: Spark's JVM
  openjdk-17-jre-headless
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi

# pip_pins VENV NAME==VERSION...: pip-installs the pins VENV does not have yet (pip's cache keeps
# the downloads for the next fresh venv).
pip_pins() {
  local venv=$1 missing=() pin
  shift
  for pin in "$@"; do
    [ "$("$venv/bin/python" -c 'import sys, importlib.metadata as m; print(m.version(sys.argv[1]))' "${pin%%==*}" \
        2>/dev/null)" = "${pin#*==}" ] || missing+=("$pin")
  done
  if ((${#missing[@]})); then
    echo "setup: pip install ${missing[*]} into $venv"
    "$venv/bin/pip" install -q "${missing[@]}" 2>&1 | { grep -v "dependency resolver\|incompatible" || true; }
    test "${PIPESTATUS[0]}" = 0
  fi
}
# TensorFlow in two generations (hora.tensorflow, its tests and the Keras examples). In .venv,
# beside Debian's torch: 2.15, the last with Keras 2 built in, and the last built against
# numpy 1 (Debian's 1.24, which torch 1.13 needs, stays: pip keeps it). In .venv-tf2, the
# newest TensorFlow with its Keras 3 and its own numpy 2, without Debian's packages (their scipy
# needs numpy 1); hora's op library built once serves both.
pip_pins .venv tensorflow-cpu==2.15.1
if [ ! -x .venv-tf2/bin/python ]; then
  /usr/bin/python3 -m venv .venv-tf2
fi
pip_pins .venv-tf2 tensorflow-cpu==2.21.0 pytest==9.2.0 cloudpickle==3.1.3
# tf-keras: Keras 2 for the newest TensorFlow (tf.keras under TF_USE_LEGACY_KERAS=1), which scripts
# written for Horovod's Keras 2 need there. Without its dependencies: it names the `tensorflow`
# package, whose code tensorflow-cpu already is.
[ "$(.venv-tf2/bin/python -c 'import importlib.metadata as m; print(m.version("tf-keras"))' 2>/dev/null)" = 2.21.0 ] ||
  .venv-tf2/bin/pip install -q --no-deps tf-keras==2.21.0
# hora.spark and hora.ray: pyspark and ray, at versions checked in one process with Debian's numpy
# 1.24 and torch 1.13 (pip leaves numpy alone: neither pins it).
pip_pins .venv pyspark==4.0.1 ray==2.50.1
# scripts/test.sh runs a failed test of the one-process suites once more (as ctest does), so that
# a timing-sensitive test is named flaky rather than failing the run; 14.0 is the last release
# for Debian's pytest 7.2.
pip_pins .venv pytest-rerunfailures==14.0
# The Keras example's ImageDataGenerator shifts its images with scipy.ndimage (Debian's scipy, in
# .venv, is built for numpy 1).
pip_pins .venv-tf2 scipy==1.17.1

build=${HORA_BUILD_DIR:-build/release}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$root/.venv" >/dev/null
fi
cmake --build "$build" -j "$(nproc)" 2>&1 | { grep -E "warning|error|Error" || true; }
test "${PIPESTATUS[0]}" = 0
cmake --install "$build" >/dev/null
# The Python package (hora.run, ...) into both venvs, with each venv's setuptools (no download).
for venv in .venv .venv-tf2; do
  HORA_CMAKE_BUILD_DIR="$build" $venv/bin/pip install --no-build-isolation --no-deps --no-index -q . >/dev/null
done
# .venv-tf2 is a whole environment too: its bin has the programs CMake installed into .venv
# (hora.run looks for horarun beside the python that runs it).
for program in horarun hora-bench engine-bench; do
  ln -sf "$root/.venv/bin/$program" ".venv-tf2/bin/$program"
done
