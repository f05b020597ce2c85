"""Ranks that mpirun or srun started get no OMP_NUM_THREADS, so OpenBLAS (Debian's torch and numpy
do their matrix products in it) starts a thread per core in each of them: init lowers each rank's
pool to its share of the host's cores (Note [thread budget]), unless the user said how many, and
leaves a rank alone on its host as it is. Each case in fresh processes: OpenBLAS sizes its pool
when it loads."""

import os
import shutil
import subprocess
import sys

import pytest

# FRONTEND: the imports that load an OpenBLAS, and a frontend of hora as hvd.
PROBE_OF = """
import os, sys
FRONTEND
from hora.common import thread_budget
before = sorted(set(thread_budget.openblas_threads().values()))
hvd.init()
after = sorted(set(thread_budget.openblas_threads().values()))  # (one pool: libblas, liblapack and libopenblas share it)
open(os.path.join(sys.argv[1], f"threads.{os.getpid()}"), "w").write(f"{hvd.local_size()} {before} {after}")
"""

PROBE = PROBE_OF.replace("FRONTEND", "import torch  # loads Debian's OpenBLAS, as a torch script does\n"
                                     "import hora.torch as hvd")
# numpy's wheel carries an OpenBLAS of its own (scipy_openblas, its functions renamed): .venv-tf2
# has one, beside the newest TensorFlow.
WHEEL_PROBE = PROBE_OF.replace("FRONTEND", "import numpy\nimport hora.tensorflow as hvd")
TF2_PYTHON = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          ".venv-tf2", "bin", "python")

CORES = len(os.sched_getaffinity(0))


def openblas_is_loaded():
    probe = "import torch; from hora.common import thread_budget as t; print(len(t.openblas_threads()))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    return done.returncode == 0 and done.stdout.strip() not in ("", "0")


pytestmark = [
    pytest.mark.skipif(CORES < 2, reason="one core: every share is the library's own single thread"),
    pytest.mark.skipif(not openblas_is_loaded(), reason="torch here does not use OpenBLAS"),
]


def reports(launcher, tmp_path, python=sys.executable, probe=PROBE, **variables):
    """Each rank's (local size, OpenBLAS threads before init, after init)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "OMP_", "OPENBLAS_", "GOTO_"))}
    env.update(variables)
    done = subprocess.run(launcher + [python, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(path.read_text() for path in tmp_path.glob("threads.*"))


needs_mpich = pytest.mark.skipif(not shutil.which("mpirun.mpich"), reason="MPICH's mpirun is not installed")


@needs_mpich
def test_ranks_that_mpirun_started_get_their_share(tmp_path):
    share = max(1, CORES // 2)
    assert reports(["mpirun.mpich", "-np", "2"], tmp_path) == [f"2 [{CORES}] [{share}]"] * 2


@needs_mpich
@pytest.mark.skipif(not os.path.exists(TF2_PYTHON), reason=f"{TF2_PYTHON} is not there (scripts/setup.sh makes it)")
def test_the_openblas_of_numpys_wheel_gets_its_share_too(tmp_path):
    share = max(1, CORES // 2)
    assert reports(["mpirun.mpich", "-np", "2"], tmp_path, TF2_PYTHON, WHEEL_PROBE) == [f"2 [{CORES}] [{share}]"] * 2


@needs_mpich
def test_the_users_openblas_threads_are_kept(tmp_path):
    assert reports(["mpirun.mpich", "-np", "2"], tmp_path, OPENBLAS_NUM_THREADS="2") == ["2 [2] [2]"] * 2


def test_a_rank_alone_on_its_host_keeps_the_librarys_default(tmp_path):
    assert reports([], tmp_path) == [f"1 [{CORES}] [{CORES}]"]


def test_horaruns_budget_reaches_openblas_before_init(tmp_path):
    horarun = os.path.join(os.path.dirname(sys.executable), "horarun")
    share = max(1, CORES // 2)
    assert reports([horarun, "-np", "2"], tmp_path) == [f"2 [{share}] [{share}]"] * 2
