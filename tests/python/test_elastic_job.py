"""Elastic jobs under horarun (--min-np, --host-discovery-script), with real processes and real
failures on this machine: 127.0.0.1 and 127.0.0.2 are two hosts to hora (each its own host name,
TCP between them). The training program, tests/python/elastic/elastic_train.py, logs each
committed sample from rank 0; every test checks that each sample of each epoch was trained on
exactly once across the resets, and that every rank ends with identical parameters."""

import collections
import os
import re
import signal
import subprocess
import sys
import threading
import time


HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic", "elastic_train.py")
STEP = re.compile(r"^\[(\d+)\]<stdout>:step (\S+) gen=(\d+) rank=(\d+) size=(\d+) pid=(\d+) step=(\d+)")
STARTED = re.compile(r"<stdout>:started with HOSTNAME=(\S+) RANK=(\S+) SIZE=(\S+) LOCAL_RANK=(\S+) LOCAL_SIZE=(\S+) "
                     r"CROSS_RANK=(\S+) CROSS_SIZE=(\S+)")


class Job:
    """A horarun job whose output is read line by line as it comes."""

    def __init__(self, horarun_args, train_args, tmp_path):
        self.log = tmp_path / "committed.log"
        self.lines = []
        self.proc = subprocess.Popen([HORARUN, *horarun_args, sys.executable, TRAIN, "--log", str(self.log),
                                      *train_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(self, predicate, timeout):
        """Reads lines until predicate(line) holds for one; returns it (or None at the timeout)."""
        deadline = time.time() + timeout
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line)
            if predicate(line):
                return line
            if time.time() > deadline:
                return None
        return None

    def finish(self, timeout=120):
        """Reads the rest of the output and waits for horarun. Through the reader wait_for used:
        communicate() would read the pipe itself and lose the lines readline had buffered."""
        rest = []
        reader = threading.Thread(target=lambda: rest.extend(iter(self.proc.stdout.readline, "")), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            self.proc.kill()
            raise subprocess.TimeoutExpired(self.proc.args, timeout, "".join(self.lines + rest))
        self.lines.extend(rest)
        self.proc.wait(timeout=30)
        return self.proc.returncode, "".join(self.lines)

    def steps(self):
        return [STEP.match(l) for l in self.lines if STEP.match(l)]

    def started(self):
        """(host, rank, size, local rank, local size, cross rank, cross size) of each worker's start."""
        return [(m.group(1), *map(int, m.groups()[1:])) for l in self.lines if (m := STARTED.search(l))]


def assert_prefixes_follow_ranks(job, output):
    """Every step line's [prefix] is the rank the program printed in it: horarun relabels a
    worker at each generation, after forwarding what it wrote in the previous one."""
    wrong = [m.group(0) for m in job.steps() if m.group(1) != m.group(4)]
    assert not wrong, f"{wrong[:5]}\n{output[-3000:]}"


def assert_each_sample_once(log, samples, epochs, output, padding=0):
    """Every sample of every epoch is in the committed log exactly once, except that an epoch that
    ends at a size that does not divide what is left of it repeats up to `padding` samples
    (size - 1: ElasticSampler pads the last shard, as DistributedSampler does)."""
    counts = collections.Counter(tuple(map(int, l.split())) for l in log.read_text().splitlines())
    missing = [(e, i) for e in range(epochs) for i in range(samples) if (e, i) not in counts]
    for e in range(epochs):
        twice = [k for k, n in counts.items() if n > 1 and k[0] == e]
        repeats = sum(counts[k] - 1 for k in twice)
        assert repeats <= padding, f"epoch {e}: trained twice: {twice[:10]}\n{output[-3000:]}"
    assert not missing, f"missing: {missing[:10]}\n{output[-3000:]}"


def test_a_killed_worker_leaves_its_host_blacklisted_and_the_others_go_on_from_the_last_commit(tmp_path):
    job = Job(["-np", "4", "--min-np", "2", "-H", "127.0.0.1:2,127.0.0.2:2"],
              ["--samples", "320", "--epochs", "2", "--step-sleep", "0.1"], tmp_path)
    victim = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "4" and m.group(4) == "3"
                          and int(m.group(7)) >= 8, timeout=90)
    assert victim, "".join(job.lines)
    killed_at = time.time()
    os.kill(int(STEP.match(victim).group(6)), signal.SIGKILL)  # rank 3, on host 127.0.0.2
    resumed = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2", timeout=60)
    code, output = job.finish()
    assert code == 0, output
    assert resumed, output
    recovery = float(STEP.match(resumed).group(2)) - killed_at
    print(f"from SIGKILL to the first step at the new size: {recovery:.2f} s")
    assert "horarun: generation 1: 2 rank(s)" in output, output
    # The survivors' errors say what happened to rank 3, in the report horarun left for it: a killed
    # process never writes its own. Rank 2, stopped with its host, wrote its own or horarun did.
    assert "rank 3 reported: horarun: worker 127.0.0.2:1 was killed by signal 9 (Killed)" in output, output
    assert "rank 2 reported: " in output, output
    sizes = {int(m.group(5)) for m in job.steps()}
    assert sizes == {4, 2}, output
    # Started as horovodrun starts them: host by host, slot by slot (read before hvd.init()).
    assert sorted(job.started()) == [("127.0.0.1", 0, 4, 0, 2, 0, 2), ("127.0.0.1", 1, 4, 1, 2, 0, 2),
                                     ("127.0.0.2", 2, 4, 0, 2, 1, 2), ("127.0.0.2", 3, 4, 1, 2, 1, 2)], output
    assert output.count("identical=True") == 2, output
    assert_prefixes_follow_ranks(job, output)
    assert_each_sample_once(job.log, 320, 2, output)


def test_discovery_adds_a_host_then_another_at_the_next_commits_and_removes_one_without_an_error(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:1\n")
    job = Job(["-np", "1", "--min-np", "1", "--host-discovery-script", f"cat {hosts}"],
              ["--samples", "600", "--epochs", "2", "--step-sleep", "0.05"], tmp_path)
    assert job.wait_for(lambda l: STEP.match(l), timeout=60), "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    grown = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2", timeout=60)
    assert grown, "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    grown_again = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "3", timeout=60)
    assert grown_again, "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n127.0.0.3:1\n")
    shrunk = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2" and int(m.group(3)) >= 3, timeout=60)
    code, output = job.finish()
    assert code == 0, output
    assert shrunk, output
    assert re.search(r"127\.0\.0\.2:0 .*removed", output) or "leaves the job" in output, output
    # The generations in order: 1 rank, 2, 3, then 2 again; the host that stayed keeps training.
    sizes = [int(m.group(5)) for m in sorted(job.steps(), key=lambda m: float(m.group(2)))]
    assert [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]] == [1, 2, 3, 2], output
    # Each added worker started with the place it joins in: after the members.
    assert job.started() == [("127.0.0.1", 0, 1, 0, 1, 0, 1), ("127.0.0.2", 1, 2, 0, 1, 1, 2),
                             ("127.0.0.3", 2, 3, 0, 1, 2, 3)], output
    assert output.count("identical=True") == 2, output
    assert_prefixes_follow_ranks(job, output)
    assert_each_sample_once(job.log, 600, 2, output, padding=2)  # an epoch may end at 3 ranks


def test_fewer_workers_than_min_np_for_longer_than_the_timeout_end_the_job_saying_so(tmp_path):
    job = Job(["-np", "2", "--min-np", "2", "--elastic-timeout", "3", "-H", "127.0.0.1:1,127.0.0.2:1"],
              ["--samples", "4000", "--epochs", "1", "--step-sleep", "0.1"], tmp_path)
    victim = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(4) == "1", timeout=60)
    assert victim, "".join(job.lines)
    os.kill(int(STEP.match(victim).group(6)), signal.SIGKILL)
    start = time.time()
    code, output = job.finish(timeout=60)
    assert code != 0, output
    assert "fewer than --min-np 2, for longer than --elastic-timeout 3 s" in output, output
    assert time.time() - start < 30, output


def test_a_second_failure_during_the_reset_still_ends_in_a_running_job(tmp_path):
    job = Job(["-np", "3", "--min-np", "1", "-H", "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"],
              ["--samples", "240", "--epochs", "2", "--step-sleep", "0.1"], tmp_path)
    first = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(4) == "1" and int(m.group(7)) >= 4, timeout=90)
    assert first, "".join(job.lines)
    second = next(STEP.match(l) for l in reversed(job.lines) if STEP.match(l) and STEP.match(l).group(4) == "2")
    os.kill(int(STEP.match(first).group(6)), signal.SIGKILL)
    time.sleep(0.3)  # the survivors are leaving the ring or joining the next generation
    os.kill(int(second.group(6)), signal.SIGKILL)
    code, output = job.finish()
    assert code == 0, output
    assert any(int(m.group(5)) == 1 for m in job.steps()), output
    assert output.count("identical=True") == 1, output
    assert_each_sample_once(job.log, 240, 2, output)


def test_a_stopped_worker_is_left_behind_and_its_host_blacklisted(tmp_path):
    """The survivor's heartbeat declares the stopped worker dead (HORA_HEARTBEAT_TIMEOUT_SECONDS,
    3 s; the collective timeout stays at 30 s) and horarun leaves it behind without its 10 s join
    window."""
    job = Job(["-np", "2", "--min-np", "1", "-H", "127.0.0.1:1,127.0.0.2:1", "--grace-seconds", "1"],
              ["--samples", "240", "--epochs", "2", "--step-sleep", "0.1"], tmp_path)
    victim = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(4) == "1" and int(m.group(7)) >= 4, timeout=90)
    assert victim, "".join(job.lines)
    pid = int(STEP.match(victim).group(6))
    stopped_at = time.time()
    os.kill(pid, signal.SIGSTOP)  # alive, but silent: no connection closes
    try:
        resumed = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "1", timeout=90)
        resumed_after = time.time() - stopped_at
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    code, output = job.finish()
    assert resumed, output
    assert code == 0, output
    assert "was declared dead by its peers" in output and "sent no heartbeat" in output, output  # why it was left
    assert resumed_after < 10, f"{resumed_after:.1f} s from the stop to a step at size 1:\n{output}"
    assert_each_sample_once(job.log, 240, 2, output)


def test_a_command_that_cannot_run_on_any_fixed_host_ends_the_job_at_once_saying_why(tmp_path):
    start = time.time()
    proc = subprocess.run([HORARUN, "-np", "2", "--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1",
                           str(tmp_path / "no-such-program")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    assert "every host is blacklisted for good" in proc.stderr, proc.stderr
    for worker in ("127.0.0.1:0", "127.0.0.2:0"):  # each failure named by its worker, not a rank
        assert f"horarun: worker {worker}: cannot execute" in proc.stderr, proc.stderr
    assert time.time() - start < 20, proc.stderr  # not --elastic-timeout's 600 s


def test_every_discovered_host_failing_for_good_ends_the_job_at_once_saying_why(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    start = time.time()
    proc = subprocess.run([HORARUN, "-np", "2", "--min-np", "1", "--host-discovery-script", f"cat {hosts}",
                           str(tmp_path / "no-such-program")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    assert "every host the --host-discovery-script lists" in proc.stderr, proc.stderr
    assert time.time() - start < 20, proc.stderr  # not --elastic-timeout's 600 s


def test_with_a_cooldown_the_job_says_which_host_it_waits_for_then_ends_at_the_timeout(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:1\n")
    start = time.time()
    proc = subprocess.run([HORARUN, "-np", "1", "--host-discovery-script", f"cat {hosts}", "--elastic-timeout", "6",
                           "--blacklist-cooldown-range", "30", "40", str(tmp_path / "no-such-program")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr
    waits = re.findall(r"horarun: no host can run a worker now: waiting for host 127\.0\.0\.1 to come back from its "
                       r"blacklisting in (\d+) s", proc.stderr)
    assert len(waits) == 1 and 29 <= int(waits[0]) <= 40, proc.stderr
    assert "for longer than --elastic-timeout 6 s" in proc.stderr, proc.stderr
    assert time.time() - start < 30, proc.stderr


def test_a_host_removed_then_added_back_trains_on_and_each_generation_is_counted_exactly(tmp_path):
    """Horovod's elastic synthetic benchmark's scenario: 2 slots in all, a host removed from the
    discovery output and added back; the worker started again in the same host:slot must not be
    counted twice (horarun once announced "3 rank(s)" for 2)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    job = Job(["-np", "2", "--min-np", "1", "--max-np", "2", "--host-discovery-script", f"cat {hosts}"],
              ["--samples", "800", "--epochs", "2", "--step-sleep", "0.05"], tmp_path)
    assert job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2", timeout=60), "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n")
    shrunk = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "1", timeout=60)
    assert shrunk, "".join(job.lines)
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    regrown = job.wait_for(lambda l: (m := STEP.match(l)) and m.group(5) == "2" and int(m.group(3)) >= 2, timeout=60)
    code, output = job.finish()
    assert code == 0, output
    assert regrown, output
    announced = [int(n) for n in re.findall(r"horarun: generation \d+: (\d+) rank\(s\)", output)]
    assert announced and max(announced) <= 2, output
    sizes = [int(m.group(5)) for m in sorted(job.steps(), key=lambda m: float(m.group(2)))]
    assert [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]] == [2, 1, 2], output
    assert announced[-1] == 2, output
    # The worker started again on 127.0.0.2 was told its place: rank 1 of 2.
    assert job.started()[-1] == ("127.0.0.2", 1, 2, 0, 1, 1, 2), output
    assert output.count("identical=True") == 2, output
    assert_each_sample_once(job.log, 800, 2, output, padding=1)
