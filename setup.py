"""Builds hora._core through CMake (the same build as the C++ library) and packages python/hora.

`pip install --no-build-isolation .` works in any venv that sees Debian's python3-pybind11 (or
pybind11-dev) and cmake; HORA_CMAKE_BUILD_DIR reuses an existing build directory (setup.sh passes
build/release, so nothing is compiled twice).
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("HORA_CMAKE_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        if not os.path.isabs(build_dir):
            build_dir = os.path.join(ROOT, build_dir)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DHORA_BUILD_TESTS=OFF", "-DHORA_BUILD_BENCHMARKS=OFF",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        targets = ["_core"] + (["hora_tensorflow"] if _cache_says(build_dir, "HORA_WITH_TENSORFLOW") else [])
        subprocess.check_call(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 1), "--target", *targets])
        built = [f for f in os.listdir(os.path.join(build_dir, "python", "hora")) if f.startswith("_core")]
        if not built:
            raise RuntimeError("CMake built no hora._core (is pybind11 installed?)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "python", "hora", built[0]), target)
        # The TensorFlow op library, when CMake found a TensorFlow (src/tensorflow/CMakeLists.txt):
        # package data of hora.tensorflow, which loads it with tf.load_op_library.
        ops = os.path.join(build_dir, "python", "hora", "tensorflow", "_ops.so")
        if os.path.exists(ops):
            package = os.path.join(os.path.dirname(target), "tensorflow")
            os.makedirs(package, exist_ok=True)
            shutil.copyfile(ops, os.path.join(package, "_ops.so"))


def _cache_says(build_dir, variable):
    """Whether CMake's cache in build_dir holds variable=ON."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
        return any(line.strip().startswith(f"{variable}:") and line.strip().endswith("=ON") for line in cache)


setup(ext_modules=[Extension("hora._core", sources=[])], cmdclass={"build_ext": CMakeBuild})
