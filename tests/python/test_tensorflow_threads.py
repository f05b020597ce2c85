"""hora.tensorflow's init sizes TensorFlow's intra- and inter-op pools to OMP_NUM_THREADS (what
horarun gives ranks that share a host), or without it to the host's cores divided among its
ranks, unless the script sized them: each case in a fresh process, since TensorFlow fixes its
pools when its runtime starts."""

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

PROBE = """
import os, sys
import tensorflow as tf
if sys.argv[1] == "script-sized":
    tf.config.threading.set_intra_op_parallelism_threads(2)
if sys.argv[1] == "runtime-started":
    tf.constant(1.0) + 1.0
import hora.tensorflow as hvd
hvd.init()
pools = f"{tf.config.threading.get_intra_op_parallelism_threads()} {tf.config.threading.get_inter_op_parallelism_threads()}"
if len(sys.argv) > 2:  # a file per process: the ranks of one job share stdout, and their writes interleave
    open(f"{sys.argv[2]}/pools.{os.getpid()}", "w").write(pools)
else:
    print(pools)
"""


def pools(case, omp_num_threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "OMP_"))}
    if omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = omp_num_threads
    done = subprocess.run([sys.executable, "-c", PROBE, case], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-2:]


@pytest.mark.parametrize("case,omp_num_threads,expect", [
    ("plain", "3", ["3", "3"]),            # the budget, in both pools
    ("plain", None, ["0", "0"]),           # no budget: TensorFlow's defaults (a thread per core)
    ("plain", "auto", ["0", "0"]),         # not a count: left alone
    ("script-sized", "3", ["2", "0"]),     # the script's choice wins
    ("runtime-started", "3", ["0", "0"]),  # too late to change: left alone, no error
])
def test_init_gives_tensorflow_the_thread_budget(case, omp_num_threads, expect):
    assert pools(case, omp_num_threads) == expect


@pytest.mark.skipif(not shutil.which("mpirun.mpich"), reason="MPICH's mpirun is not installed")
def test_ranks_started_without_a_budget_share_the_hosts_cores(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "OMP_"))}
    done = subprocess.run(["mpirun.mpich", "-np", "2", sys.executable, "-c", PROBE, "plain", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    share = str(max(1, len(os.sched_getaffinity(0)) // 2))
    reports = [path.read_text().split() for path in tmp_path.glob("pools.*")]
    assert reports == [[share, share]] * 2, reports
