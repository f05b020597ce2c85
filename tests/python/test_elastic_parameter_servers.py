"""Parameter servers in elastic jobs (docs/parameter_servers.md, "Servers in an elastic job"):
horarun --min-np/--max-np with --servers, real processes, real SIGKILLs. 127.0.0.1 and 127.0.0.2
are two hosts to hora. A dead server or a dead worker makes every worker raise a named
HoraInternalError; hvd.elastic.run restores the last commit, the job re-forms with new servers
for the new ranks, and training finishes with the weights a numpy replay of the committed steps
gives (tests/python/elastic/ps_elastic_train.py). Every wait has a deadline."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic"))
from ps_elastic_train import COMMIT_EVERY, reference_weights  # noqa: E402
from test_parameter_servers import server_pid  # noqa: E402

HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic", "ps_elastic_train.py")
STEP = re.compile(r"step (\d+) gen=(\d+) rank=(\d+) size=(\d+) pid=(\d+)")
JOB_DEADLINE_S = 55


class Job:
    """A horarun job whose output (stdout and stderr together) a thread collects as it comes."""

    def __init__(self, horarun_args, tmp_path, steps, extra=(), program=None):
        """Runs ps_elastic_train.py, or `program` (a command line) instead."""
        self.out = tmp_path
        program = program or [sys.executable, TRAIN, "--out", str(tmp_path), "--steps", str(steps), *extra]
        self.proc = subprocess.Popen([HORARUN, *horarun_args, *program], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.deadline = time.monotonic() + JOB_DEADLINE_S
        self.lines = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                        daemon=True)
        self._reader.start()

    def output(self):
        return "".join(self.lines)

    def wait_for(self, predicate):
        """The first line (read so far or later) for which predicate holds, before the deadline."""
        while time.monotonic() < self.deadline:
            for line in list(self.lines):
                if (found := predicate(line)):
                    return found
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"never seen before the job's deadline or end:\n{self.output()[-4000:]}")

    def finish(self):
        try:
            code = self.proc.wait(timeout=max(1, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"the job did not end within {JOB_DEADLINE_S} s:\n{self.output()[-4000:]}")
        self._reader.join(timeout=10)
        return code, self.output()

    def results(self, ranks):
        return [json.loads((self.out / f"rank{r}.json").read_text()) for r in range(ranks)]


def step_between_commits(size, generation, at_least):
    """A predicate: rank 0 printed a step of this generation and size, at least `at_least`, 1 or
    2 steps past a commit (so a kill then leaves a step to redo and comes before the next one)."""
    def predicate(line):
        m = STEP.search(line)
        if m and (int(m[2]), int(m[3]), int(m[4])) == (generation, 0, size) and int(m[1]) >= at_least \
                and int(m[1]) % COMMIT_EVERY in (1, 2):
            return int(m[1])
        return None
    return predicate


def assert_resumed_from_the_last_commit(job, killed_after):
    """Generation 1 began at the step after a commit, the last one generation 0 made: at or after
    the one before the step seen when the kill was sent, and at or before the last step rank 0 ran
    (on a busy machine, rank 0 may pass another commit before the kill lands)."""
    def steps(generation):
        return [int(m[1]) for m in map(STEP.search, job.lines) if m and m[2] == generation and m[3] == "0"]
    before, redone = steps("0"), steps("1")
    assert redone and (redone[0] - 1) % COMMIT_EVERY == 0, (killed_after, redone)
    assert killed_after // COMMIT_EVERY * COMMIT_EVERY < redone[0] <= max(before) + 1, (killed_after, before, redone)


def check_training(results, steps, sizes, output):
    """Every rank ends with the same committed log (every step once, at the sizes expected) and
    the weights of its numpy replay."""
    for run in results:
        log = [tuple(entry) for entry in run["log"]]
        assert [s for s, _ in log] == list(range(steps)), f"a committed step was lost or repeated: {log}"
        assert {n for _, n in log} == sizes, (log, output[-3000:])
        numpy.testing.assert_allclose(run["weights"], reference_weights(log), rtol=1e-5, atol=1e-7)
        assert run["weights"] == results[0]["weights"], [r["weights"] for r in results]


def test_a_killed_server_is_named_by_every_worker_and_the_job_re_forms_with_new_servers(tmp_path):
    job = Job(["-np", "3", "--min-np", "2", "--max-np", "3", "--servers", "1", "-H", "127.0.0.1:2,127.0.0.2:1"],
              tmp_path, steps=30)
    killed_after = job.wait_for(step_between_commits(3, 0, 6))
    pid = server_pid(job.proc.pid, 0, 0)
    assert pid, "parameter server 0 of generation 0 is not a child of horarun"
    os.kill(pid, signal.SIGKILL)
    code, output = job.finish()
    assert code == 0, output
    assert f"horarun: parameter server 0 (host 127.0.0.1, pid {pid}) of generation 0 was killed by signal 9" \
        in output, output
    for r in range(3):  # every worker names the dead server
        caught = re.search(rf"rank {r} caught (\w+): .*parameter server 0 \(host 127\.0\.0\.1, pid {pid}\)", output)
        assert caught and caught[1] == "PeerError", output
    assert "horarun: generation 1: 3 rank(s)" in output, output
    # Training went on from the last commit with generation 1's own server.
    assert_resumed_from_the_last_commit(job, killed_after)
    check_training(job.results(3), 30, {3}, output)


def test_a_killed_worker_re_forms_the_job_with_servers_for_the_survivors(tmp_path):
    job = Job(["-np", "3", "--min-np", "2", "--max-np", "3", "--servers", "2", "-H", "127.0.0.1:2,127.0.0.2:1"],
              tmp_path, steps=30)
    killed_after = job.wait_for(step_between_commits(3, 0, 6))
    victim = job.wait_for(lambda line: (m := STEP.search(line)) and m[2] == "0" and m[3] == "2" and int(m[5]))
    os.kill(victim, signal.SIGKILL)  # rank 2, alone on host 127.0.0.2
    code, output = job.finish()
    assert code == 0, output
    for r in (0, 1):  # the servers name the dead worker (or a commit's broadcast does, as rank 2)
        caught = re.search(rf"rank {r} caught (\w+): (.*)", output)
        assert caught and ("worker 2" in caught[2] or "rank 2" in caught[2]), output
    assert "horarun: generation 1: 2 rank(s)" in output, output
    assert_resumed_from_the_last_commit(job, killed_after)
    check_training(job.results(2), 30, {3, 2}, output)


def test_ps_async_a_killed_worker_re_forms_the_job_and_the_new_servers_take_the_restored_commit(tmp_path):
    # The servers apply each push as it comes, so the weights depend on the order of the pushes:
    # no replay here, but every step is committed once, and the new servers register (and hand
    # back) the restored commit, so the job finishes with finite weights that moved.
    job = Job(["-np", "3", "--min-np", "2", "--max-np", "3", "--servers", "2", "-H", "127.0.0.1:2,127.0.0.2:1"],
              tmp_path, steps=30, extra=["--mode", "ps-async"])
    job.wait_for(step_between_commits(3, 0, 6))
    victim = job.wait_for(lambda line: (m := STEP.search(line)) and m[2] == "0" and m[3] == "2" and int(m[5]))
    os.kill(victim, signal.SIGKILL)
    code, output = job.finish()
    assert code == 0, output
    for r in (0, 1):
        assert re.search(rf"rank {r} caught \w+: .*(worker 2|rank 2)", output), output
    assert "horarun: generation 1: 2 rank(s)" in output, output
    for run in job.results(2):
        assert [s for s, _ in run["log"]] == list(range(30)), run["log"]
        assert all(numpy.isfinite(run["weights"])) and min(run["weights"]) < -1, run["weights"]


def test_ps_async_a_killed_server_re_forms_the_job_and_the_new_servers_keep_the_optimizer_state(tmp_path):
    """Adam on the servers: each commit holds the servers' state (pulled by state_dict()), and the
    new servers start from the restored one, so the optimizer's step count at the end holds the
    pushes before the commit (at least rank 0's own) plus every push of generation 1. New servers
    that started from zero would count generation 1's alone."""
    job = Job(["-np", "3", "--min-np", "2", "--max-np", "3", "--servers", "2", "-H", "127.0.0.1:2,127.0.0.2:1"],
              tmp_path, steps=30, extra=["--mode", "ps-async", "--optimizer", "adam"])
    job.wait_for(step_between_commits(3, 0, 6))
    pid = server_pid(job.proc.pid, 0, 0)
    assert pid, "parameter server 0 of generation 0 is not a child of horarun"
    os.kill(pid, signal.SIGKILL)
    code, output = job.finish()
    assert code == 0, output
    assert "horarun: generation 1: 3 rank(s)" in output, output
    resumed = min(int(m[1]) for m in map(STEP.search, job.lines) if m and m[2] == "1")
    committed = resumed - 1  # generation 1 redid steps committed .. 29 on each of 3 workers
    for run in job.results(3):
        assert [s for s, _ in run["log"]] == list(range(30)), run["log"]
        carried = run["optimizer_step"] - 3 * (30 - committed)
        assert committed <= carried <= 3 * (committed + COMMIT_EVERY), (run["optimizer_step"], committed, output[-3000:])


def cpp_elastic_train():
    """The C++ elastic example (examples/cpp/elastic_train.cpp), built under HORA_BUILD_DIR."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, os.environ.get("HORA_BUILD_DIR", "build/release"), "examples", "cpp", "elastic_train")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built (hora::torch needs libtorch)")
    return path


CPP_STEP = re.compile(r"<stdout>:step (\d+) gen=(\d+) rank=(\d+) size=(\d+) pid=(\d+)")


def run_cpp_job_killing_its_server(tmp_path, *example_args):
    """The C++ example on 3 workers (127.0.0.1:2, 127.0.0.2:1) with 1 server, 120 steps committed
    every 5, the server of generation 0 SIGKILLed after step 20: the job's output, once it ended
    with 0 and horarun named the server, and the steps each worker reset to."""
    job = Job(["-np", "3", "--min-np", "2", "--max-np", "3", "--servers", "1", "-H", "127.0.0.1:2,127.0.0.2:1"],
              tmp_path, steps=120, program=[cpp_elastic_train(), "--steps", "120", "--commit-every", "5",
                                            *example_args])
    job.wait_for(lambda line: (m := CPP_STEP.search(line)) and m[2] == "0" and int(m[1]) >= 20)
    pid = server_pid(job.proc.pid, 0, 0)
    assert pid, "parameter server 0 of generation 0 is not a child of horarun"
    os.kill(pid, signal.SIGKILL)
    code, output = job.finish()
    assert code == 0, output
    assert f"parameter server 0 (host 127.0.0.1, pid {pid}) of generation 0 was killed by signal 9" in output, output
    resets = re.findall(r"<stdout>:reset to step (\d+) after: ", output)
    return output, resets


def test_cpp_frontend_a_killed_server_re_forms_the_job_and_its_optimizer_connects_to_the_new_servers(tmp_path):
    """hora::torch's DistributedOptimizer in ps-sync in an elastic job: the server of generation 0
    is SIGKILLed; every worker's step fails, restores its last commit, joins generation 1 and makes
    its optimizer again, which connects to generation 1's server (not to the dead one, nor waits
    for it); training finishes every step at size 3, every rank with the same parameters."""
    output, resets = run_cpp_job_killing_its_server(tmp_path, "--mode", "ps-sync")
    assert len(resets) == 3 and len(set(resets)) == 1 and int(resets[0]) % 5 == 0, output[-3000:]
    assert re.search(r"<stdout>:step 120 gen=1 rank=0 size=3 ", output), output[-3000:]
    assert len(re.findall(r"<stdout>:done rank=\d size=3 loss=0\.00\d+ identical=yes", output)) == 3, output[-3000:]


def test_cpp_frontend_ps_async_a_re_formed_job_s_new_server_starts_from_the_committed_optimizer_state(tmp_path):
    """hora::torch in ps-async with Adam in an elastic job: each commit pulls the servers' Adam
    state into the optimizer and copies it; the server of generation 0 is SIGKILLed, the workers
    restore the commit and make their optimizer again with that state, which the new server takes
    as its start: its step count goes on from the commit's (a fresh server's would count
    generation 1's pushes alone) and the restored moments are not zero."""
    output, resets = run_cpp_job_killing_its_server(tmp_path, "--mode", "ps-async", "--optimizer", "adam")
    assert len(resets) == 3 and int(resets[0]) % 5 == 0, output[-3000:]
    committed = int(re.search(r"\[0\]<stdout>:optimizer state at step (\d+): steps=(\d+) moments=([\d.]+)",
                              output.split("reset to step")[-1])[1])
    restored = re.findall(rf"<stdout>:optimizer state at step {committed}: steps=(\d+) moments=([\d.]+)", output)
    assert restored and all(int(s) >= committed and float(m) > 0 for s, m in restored), output[-3000:]
    done = re.search(r"\[0\]<stdout>:done rank=0 size=3 loss=([\d.]+) identical=\w+ optimizer_steps=(\d+)", output)
    assert done and float(done[1]) < 0.01, output[-3000:]
    carried = int(done[2]) - 3 * (120 - committed)  # the new server's count minus generation 1's pushes
    assert committed <= carried <= 3 * (committed + 5), (done[2], committed, output[-3000:])
