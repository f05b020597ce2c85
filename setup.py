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
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_core", "-j", str(os.cpu_count() or 1)])
        built = [f for f in os.listdir(os.path.join(build_dir, "python", "hora")) if f.startswith("_core")]
        if not built:
            raise RuntimeError("CMake built no hora._core (is pybind11 installed?)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "python", "hora", built[0]), target)


setup(ext_modules=[Extension("hora._core", sources=[])], cmdclass={"build_ext": CMakeBuild})
