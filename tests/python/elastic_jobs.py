"""The elastic training job of the elastic runners' tests (ray/test_ray_elastic.py,
spark/test_spark_elastic.py, and tests/integration/runners_multihost.py across namespace hosts),
and what they check it against.

The training is hora.torch's elastic loop on a linear model whose gradient at step s on rank r
has a closed form; every step appends (step, size) to the committed state, so the final weights
must equal a numpy replay of that log, and the log must hold every step exactly once: a failure
may only redo the steps since the last commit. Rank 0 writes its progress to a file, and every
rank its pid, so that the driver can act on the running job."""

import os
import threading
import time

import numpy

COMMIT_EVERY = 5
LR = 0.1
MAX_STEPS = 3000     # a bound so that a training that never sees its event ends (and fails)
RUN_DEADLINE_S = 240  # each run, from run() to its result or error (a bound: a machine under load is slow)


def gradient(step, rank):
    return numpy.array([(step + 1) * (rank + 1) + i for i in range(4)], dtype=numpy.float64) / 100.0


def reference_weights(log):
    """The weights after the logged steps, by numpy: plain SGD on the average of the ranks'
    gradients at each step's size."""
    w = numpy.zeros(4)
    for step, size in log:
        w -= LR * numpy.mean([gradient(step, r) for r in range(size)], axis=0)
    return w


def train(progress_dir, done_when):
    """hora.torch's elastic loop; ``done_when(log)`` (the committed (step, size) log) ends it on
    every rank at the same step. Returns the weights, the log, the steps this process ran (with
    the redone ones) and its pid."""
    import torch

    import hora.torch as hvd

    hvd.init()
    model = torch.nn.Linear(4, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0, log=[])
    ran = []

    @hvd.elastic.run
    def loop(state):
        # Written at every (re)start: where the test finds this worker's process.
        with open(os.path.join(progress_dir, f"pid.{hvd.rank()}"), "w") as f:
            f.write(f"{os.getpid()}\n")
        while not done_when(state.log) and state.step < MAX_STEPS:
            optimizer.zero_grad()
            g = torch.from_numpy(gradient(state.step, hvd.rank())).reshape(1, 4)
            (model.weight * g).sum().backward()
            optimizer.step()
            ran.append(state.step)
            state.log.append((state.step, hvd.size()))
            state.step += 1
            if hvd.rank() == 0:
                with open(os.path.join(progress_dir, "progress.tmp"), "w") as f:
                    f.write(f"{state.step} {hvd.size()}\n")
                os.replace(os.path.join(progress_dir, "progress.tmp"), os.path.join(progress_dir, "progress"))
            time.sleep(0.05)
            if state.step % COMMIT_EVERY == 0:
                state.commit()

    loop(state)
    return model.weight.detach().numpy().reshape(4).copy(), list(state.log), ran, os.getpid()


def progress(progress_dir):
    try:
        with open(os.path.join(progress_dir, "progress")) as f:
            step, size = f.read().split()
        return int(step), int(size)
    except (OSError, ValueError):
        return 0, 0


def wait_progress(job, progress_dir, size, steps, between_commits=False):
    """The step count once training ran ``steps`` steps at ``size``; with ``between_commits``,
    at a step 1 or 2 past a commit, so that a kill then comes at least 2 steps before the next
    commit and after at least 1 step that the restore must redo. Fails at the job's deadline, or
    with the job's error if it ended first."""
    while True:
        step, now = progress(progress_dir)
        if now == size and step >= steps and (not between_commits or step % COMMIT_EVERY in (1, 2)):
            return step
        if job.ended():
            job.result()  # raises the run's error
            raise AssertionError(f"the run ended before {steps} steps at size {size} (at {step}, {now})")
        assert time.monotonic() < job.deadline, \
            f"training never reached {steps} steps at size {size} within {RUN_DEADLINE_S} s (at {step}, {now})"
        time.sleep(0.05)


class RunInThread:
    """executor.run(fn, args=args) in a thread, so that the test can act on the cluster
    meanwhile; result() waits (up to RUN_DEADLINE_S from the start) and returns it or raises."""

    def __init__(self, executor, fn, args):
        self._box = {}
        self.deadline = time.monotonic() + RUN_DEADLINE_S
        self._thread = threading.Thread(target=self._run, args=(executor, fn, args), daemon=True)
        self._thread.start()

    def _run(self, executor, fn, args):
        try:
            self._box["result"] = executor.run(fn, args=args)
        except BaseException as e:  # noqa: B036 - handed to the test's thread
            self._box["error"] = e

    def ended(self):
        return not self._thread.is_alive()

    def result(self):
        self._thread.join(timeout=max(0, self.deadline - time.monotonic()))
        assert self.ended(), f"the elastic run did not end within {RUN_DEADLINE_S} s"
        if "error" in self._box:
            raise self._box["error"]
        return self._box["result"]


def check_training(weights, log):
    steps = [s for s, _ in log]
    assert steps == list(range(len(log))), "a committed step was lost or repeated"
    numpy.testing.assert_allclose(weights, reference_weights(log), rtol=1e-12)


def grew_to(size):
    return lambda log: sum(1 for _, n in log if n == size) >= 2 * COMMIT_EVERY


def shrank_from(size):
    return lambda log: any(n == size for _, n in log) and len(log) >= 10 and all(n < size for _, n in log[-10:])


def check_redone(ran, killed_after):
    """``ran``: the steps a surviving rank ran, redone ones included; ``killed_after``: the step
    count when the other rank was killed. Only the steps since the last commit were redone."""
    redone = sorted(set(s for s in ran if ran.count(s) > 1))
    last_commit = killed_after // COMMIT_EVERY * COMMIT_EVERY
    assert redone and redone[0] == last_commit and redone == list(range(last_commit, redone[-1] + 1)), \
        (redone, killed_after)
    assert redone[-1] <= killed_after + 1, (redone, killed_after)
