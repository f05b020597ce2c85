"""Elastic Keras jobs under horarun, with real processes and real failures (127.0.0.1 and
127.0.0.2 are two hosts to hora): tests/python/elastic/keras_elastic_train.py trains with
model.fit inside hvd.elastic.run, as Horovod's elastic Keras example does. A worker killed in
the middle of an epoch leaves the other to go on from the last commit; a parameter server killed
in the middle of an epoch re-forms the job with a new one; a host that the discovery script adds
joins with the state of the job. Under each Keras generation that is installed:
Keras 2 (this venv's TensorFlow 2.15) and Keras 3 (.venv-tf2's TensorFlow)."""

import os
import re
import signal
import subprocess
import sys

import pytest

from test_elastic_job import HORARUN, Job
from test_parameter_servers import server_pid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "tests", "python", "elastic", "keras_elastic_train.py")
STEP = re.compile(r"^\[(\d+)\]<stdout>:step (\S+) gen=(\d+) rank=(\d+) size=(\d+) pid=(\d+) epoch=(\d+) batch=(\d+)")
RESET = re.compile(r"<stdout>:reset: size (\d+) epoch=(\d+) batch=(\d+)")
PYTHONS = {"keras2": sys.executable, "keras3": os.path.join(ROOT, ".venv-tf2", "bin", "python")}


class KerasJob(Job):
    def __init__(self, horarun_args, python, train_args):
        self.lines = []
        self.proc = subprocess.Popen([HORARUN, *horarun_args, python, TRAIN, *train_args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)

    def steps(self):
        return [m for line in self.lines if (m := STEP.match(line))]


def python_of(generation):
    python = PYTHONS[generation]
    if not os.path.exists(python):
        pytest.skip(f"{python} is not there (scripts/setup.sh makes it)")
    return python


@pytest.mark.parametrize("generation", sorted(PYTHONS))
def test_a_killed_worker_leaves_fit_to_go_on_from_the_last_commit(generation):
    job = KerasJob(["-np", "2", "--min-np", "1", "-H", "127.0.0.1:1,127.0.0.2:1"], python_of(generation),
                   ["--epochs", "3", "--steps", "20"])
    victim = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(4) == "1" and m.group(7) == "1"
                          and int(m.group(8)) >= 5, timeout=120)
    assert victim, "".join(job.lines)
    os.kill(int(STEP.match(victim).group(6)), signal.SIGKILL)  # rank 1, in the middle of epoch 1
    code, output = job.finish()
    assert code == 0, output
    before = [m for m in job.steps() if m.group(5) == "2" and m.group(4) == "0"]
    after = [m for m in job.steps() if m.group(5) == "1"]
    assert before and after, output
    # The state rank 0 restored is its last commit: the batch it printed last (its commit comes
    # first), or the next epoch's start when that batch ended an epoch.
    last = (int(before[-1].group(7)), int(before[-1].group(8)))
    resets = [tuple(map(int, m.groups())) for line in job.lines if (m := RESET.search(line))]
    assert resets and resets[0][0] == 1, output
    assert resets[0][1:] in (last, (last[0] + 1, 0)), output
    # Training resumed in that epoch, not from the start, and finished every epoch.
    assert int(after[0].group(7)) == resets[0][1], output
    assert "done rank=0 size=1 epochs=3 identical=True" in output, output


def run_and_kill_the_server(generation, train_args):
    """2 workers and 1 server, 3 epochs of 20 batches; the server of generation 0 SIGKILLed in the
    middle of epoch 1. Returns the job, the server's pid, horarun's exit code and output."""
    job = KerasJob(["-np", "2", "--min-np", "2", "--servers", "1", "-H", "127.0.0.1:1,127.0.0.2:1"],
                   python_of(generation), ["--epochs", "3", "--steps", "20", *train_args])
    try:
        assert job.wait_for(lambda l: (m := STEP.match(l)) and m.group(7) == "1" and int(m.group(8)) >= 5,
                            timeout=120), "".join(job.lines)
        pid = server_pid(job.proc.pid, 0, 0)
        assert pid, "parameter server 0 of generation 0 is not a child of horarun"
        os.kill(pid, signal.SIGKILL)
        code, output = job.finish()
    finally:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
    return job, pid, code, output


@pytest.mark.parametrize("generation", sorted(PYTHONS))
def test_a_killed_parameter_server_re_forms_fit_with_a_new_one(generation):
    job, pid, code, output = run_and_kill_the_server(generation, ["--mode", "ps-sync"])
    assert code == 0, output
    assert f"parameter server 0 (host 127.0.0.1, pid {pid}) of generation 0 was killed by signal 9" in output, output
    # Both workers restored their last commit, in the middle of epoch 1, and fit went on through
    # generation 1's server to the end, every rank with the same weights.
    resets = [(line[:3], tuple(map(int, m.groups()))) for line in job.lines if (m := RESET.search(line))]
    assert sorted(rank for rank, _ in resets) == ["[0]", "[1]"], output
    assert all(size == 2 and epoch == 1 for _, (size, epoch, _) in resets), output
    assert any(m.group(3) == "1" for m in job.steps()), output
    assert "done rank=0 size=2 epochs=3 identical=True" in output, output
    assert "done rank=1 size=2 epochs=3 identical=True" in output, output


@pytest.mark.parametrize("generation", sorted(PYTHONS))
def test_ps_async_a_killed_server_re_forms_fit_and_the_new_server_keeps_the_optimizer_state(generation):
    """Adam on the server: each commit pulls the server's state into the optimizer's slots (which
    ps-async never updates otherwise), and the new server starts from the restored commit's, so its
    step count at the end holds the pushes before that commit (at least rank 0's own) plus every
    push of generation 1. A server that started from zero would count generation 1's alone."""
    job, _, code, output = run_and_kill_the_server(generation, ["--mode", "ps-async", "--optimizer", "adam"])
    assert code == 0, output
    resets = {line[:3]: line for line in job.lines if RESET.search(line)}
    assert sorted(resets) == ["[0]", "[1]"], output
    for line in resets.values():
        assert float(re.search(r"slots=(\S+)", line)[1]) > 0, line  # the commit held the pulled moments
    _, epoch, batch = map(int, RESET.search(resets["[0]"]).groups())
    committed = epoch * 20 + batch  # rank 0's pushes before the commit it restored
    redone = sum(1 for m in job.steps() if m.group(3) == "1")  # both workers' pushes in generation 1
    done = re.search(r"done rank=0 size=2 epochs=3 identical=\w+ server_step=(\d+)", output)
    assert done, output
    carried = int(done[1]) - redone
    assert committed <= carried <= 2 * committed + 4, (int(done[1]), redone, committed, output[-3000:])


def test_a_discovered_host_joins_fit_with_the_state_of_the_job(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:1\n")
    job = KerasJob(["-np", "1", "--min-np", "1", "--host-discovery-script", f"cat {hosts}"], python_of("keras2"),
                   ["--epochs", "4", "--steps", "20", "--hold-until-size", "2"])
    assert job.wait_for(lambda l: STEP.match(l), timeout=120), "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    grown = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2", timeout=120)
    code, output = job.finish()
    assert grown, output
    assert code == 0, output
    # Rank 0 held at the end of epoch 0 until the newcomer joined; both then trained the same
    # epochs, and every rank ends with the same weights, although each started from its own.
    epochs_at_two = {rank: sorted({int(m.group(7)) for m in job.steps() if m.group(5) == "2" and m.group(4) == rank})
                     for rank in "01"}
    assert epochs_at_two["0"] == epochs_at_two["1"] == [0, 1, 2, 3], output
    assert "done rank=0 size=2 epochs=4 identical=True" in output, output
    assert "done rank=1 size=2 epochs=4 identical=True" in output, output
