"""hora.tensorflow in real jobs that go wrong: a rank that dies, and a rank that never comes. The
other's ops raise TensorFlow errors naming the rank or the tensor within seconds, in eager mode
and inside tf.function, and hvd.elastic.run would see them as HoraInternalError (the jobs run
under horarun with the project's TensorFlow, in .venv)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("tensorflow")

HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import tensorflow as tf
    import hora.tensorflow as hvd
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stay long enough to report what we saw
    hvd.init()
    r, mode, fault = hvd.rank(), sys.argv[1], sys.argv[2]

    def op(name):
        eager = lambda x: hvd.allreduce(x, name=name)
        return tf.function(eager) if mode == "function" else eager

    steady, late = op("grad"), op("late")
    try:
        for step in range(20):
            steady(tf.ones([1000]))
        if r == 1:
            if fault == "die":
                os._exit(9)
            time.sleep(8)  # alive, but not calling "late" (past the stall limit)
            os._exit(0)
        # A name the engine has not cached yet, so that the stall inspector sees it.
        late(tf.ones([1000]))
    except tf.errors.OpError as e:
        print("rank %d caught %s: %s" % (r, type(e).__name__, " ".join(e.message.split())), flush=True)
        sys.exit(0)
""")


def job(tmp_path, mode, fault, extra=()):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    out = subprocess.run([HORARUN, "-np", "2", "--grace-seconds", "20", *extra, sys.executable, str(script), mode,
                          fault], capture_output=True, text=True, timeout=120, env=env)
    caught = [line for line in out.stdout.splitlines() if line.startswith("[0]<stdout>:rank 0 caught")]
    assert caught, out.stdout + out.stderr
    return out, caught[0], time.time() - start


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_killed_rank_is_an_unknown_error_naming_it(tmp_path, mode):
    out, line, elapsed = job(tmp_path, mode, "die")
    assert out.returncode == 9, out.stdout + out.stderr
    assert "UnknownError" in line and "rank 1" in line, line
    assert elapsed < 40, f"the job took {elapsed:.1f} s to end"


def test_a_silent_rank_fails_the_others_at_the_stall_limit_naming_the_tensor(tmp_path):
    _, line, _ = job(tmp_path, "function", "hang", ["-x", "HORA_STALL_SHUTDOWN_TIME_SECONDS=3"])
    assert "UnknownError" in line and "'late'" in line and "missing on ranks [1]" in line, line
