"""A rank that dies or leaves mid-training: the others raise HoraInternalError naming it and how
it left, within seconds, instead of hanging (real jobs under horarun)."""

import pytest

import os
import subprocess
import sys
import textwrap
import time

HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")

SCRIPT = textwrap.dedent("""
    import os, signal, sys, torch
    import hora.torch as hvd
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stay long enough to report what we saw
    hvd.init()
    r = hvd.rank()
    try:
        for step in range(1000000):
            if r == 2 and step == 50:
                os._exit(9)
            hvd.allreduce(torch.ones(1000), name="grad.%d" % (step % 10))
    except hvd.HoraInternalError as e:
        print("rank %d caught %s: %s" % (r, type(e).__name__, str(e).splitlines()[0]), flush=True)
        sys.exit(0)
""")


def test_a_killed_rank_raises_on_the_others(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    start = time.time()
    out = subprocess.run([HORARUN, "-np", "3", "--grace-seconds", "20", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=60)
    elapsed = time.time() - start
    assert out.returncode == 9, out.stdout + out.stderr
    for r in (0, 1):
        lines = [l for l in out.stdout.splitlines() if l.startswith(f"[{r}]<stdout>:rank {r} caught")]
        assert lines, out.stdout + out.stderr
        assert "PeerError" in lines[0] and "rank 2" in lines[0], lines[0]
    assert elapsed < 15, f"the job took {elapsed:.1f} s to end"


LEAVER = textwrap.dedent("""
    import os, signal, sys, torch
    import hora.torch as hvd
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stay long enough to report what we saw
    hvd.init()
    r = hvd.rank()
    hvd.allreduce(torch.ones(10), name="warm")
    if r == 1:
        how = sys.argv[1]
        if how == "raise":
            raise ValueError("bad shard 3")
        if how == "shutdown":
            hvd.shutdown()
        sys.exit(0)  # "shutdown" and "exit": leave without an error
    try:
        hvd.allreduce(torch.ones(10), name="never.on.rank.1")
    except hvd.HoraInternalError as e:
        print("rank %d caught %s: %s" % (r, type(e).__name__, e), flush=True)
""")


@pytest.mark.parametrize("how, reason", [
    ("raise", "rank 1 is exiting after an unhandled ValueError: bad shard 3"),
    ("shutdown", "rank 1 called shutdown()"),
    ("exit", "rank 1 is exiting without having called shutdown()"),
])
def test_a_rank_that_leaves_is_named_with_how_it_left(tmp_path, how, reason):
    script = tmp_path / "train.py"
    script.write_text(LEAVER)
    out = subprocess.run([HORARUN, "-np", "3", "--grace-seconds", "20", sys.executable, str(script), how],
                         capture_output=True, text=True, timeout=60)
    for r in (0, 2):
        want = f"[{r}]<stdout>:rank {r} caught ShutdownError: hora has shut down: {reason}"
        assert want in out.stdout, out.stdout + out.stderr


FROZEN = textwrap.dedent("""
    import os, signal, sys, time, torch
    import hora.torch as hvd
    hvd.init()
    r = hvd.rank()
    try:
        for step in range(1000000):
            if r == 2 and step == 50:
                with open(sys.argv[1], "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGSTOP)  # frozen: its sockets stay open
            hvd.allreduce(torch.ones(1000), name="grad.%d" % (step % 10))
    except hvd.HoraInternalError as e:
        print("rank %d caught %s at %r: %s" % (r, type(e).__name__, time.time(), str(e).splitlines()[0]), flush=True)
        sys.exit(3)
""")


def test_a_stopped_rank_is_named_by_the_others_within_five_seconds(tmp_path):
    """The heartbeat's default (HORA_HEARTBEAT_TIMEOUT_SECONDS=3) against a SIGSTOPped rank, with
    the collective timeout at its 30 s: the job ends well before that."""
    script, stamp = tmp_path / "train.py", tmp_path / "stopped_at"
    script.write_text(FROZEN)
    start = time.time()
    out = subprocess.run([HORARUN, "-np", "3", "--grace-seconds", "1", sys.executable, str(script), str(stamp)],
                         capture_output=True, text=True, timeout=60)
    elapsed = time.time() - start
    assert out.returncode != 0, out.stdout + out.stderr
    stopped_at = float(stamp.read_text())
    caught = [l for l in out.stdout.splitlines() if "caught" in l]
    assert len(caught) >= 1, out.stdout + out.stderr
    for line in caught:
        assert "PeerError" in line and "rank 2 (" in line and "sent no heartbeat" in line, line
        at = float(line.split(" at ")[1].split(":")[0])
        assert at - stopped_at < 5, f"{at - stopped_at:.1f} s after the stop: {line}"
    assert elapsed < 25, f"the job took {elapsed:.1f} s to end"
