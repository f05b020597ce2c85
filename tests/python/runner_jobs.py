"""Jobs that the runner tests (hora.spark, hora.ray, across namespace hosts too) run.

A short data-parallel training with hora.torch, and the same training in one process as its
reference: with equal shards, the average of the ranks' gradients is the gradient of the mean
loss over all shards, so the trained weights must match. And a training that runs until one of
its ranks is killed, with the killer."""

STEPS = 5
RANKS = 2


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _shard(rank):
    import torch

    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(32, 8, generator=g)
    return x, x.sum(1, keepdim=True)


def train():
    """One rank: returns (the averaged loss at every step, the trained weights)."""
    import torch
    import hora.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = _shard(hvd.rank())
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(hvd.allreduce(loss.detach(), op=hvd.Average, name="loss").item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def reference():
    """The same steps in one process on all shards at once: the weights after training."""
    import torch

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    shards = [_shard(r) for r in range(RANKS)]
    x, y = torch.cat([s[0] for s in shards]), torch.cat([s[1] for s in shards])
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().numpy() for p in model.parameters()]


def check(results):
    """The ranks agree on every loss and weight, the loss fell, and the weights are the reference's."""
    import numpy

    (losses0, weights0), (losses1, weights1) = results
    assert losses0 == losses1
    assert losses0[-1] < losses0[0]
    for a, b, want in zip(weights0, weights1, reference()):
        numpy.testing.assert_array_equal(a, b)
        numpy.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)


def train_until_killed(pid_dir):
    """One rank that trains until it is killed; once both ranks train, each writes its pid (and
    its parent's) to pid_dir/rank<r>."""
    import os
    import time

    import hora.torch as hvd
    import torch

    hvd.init()
    hvd.allreduce(torch.ones(1), name="warmup")
    path = os.path.join(pid_dir, f"rank{hvd.rank()}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {os.getppid()}")
    os.rename(path + ".tmp", path)
    for step in range(100_000):
        hvd.allreduce(torch.ones(1000), name=f"step{step}")
        time.sleep(0.01)


def run_and_kill(run, target_of=lambda pid, ppid: pid):
    """run_and_strike, the strike being SIGKILL of ``target_of(rank 1's pid, its parent's pid)``
    (a pid, or a list of them)."""
    import os
    import signal

    def kill(pid, ppid):
        targets = target_of(pid, ppid)
        for target in targets if isinstance(targets, list) else [targets]:
            try:
                os.kill(target, signal.SIGKILL)  # pids are the machine's, whatever the namespace
            except ProcessLookupError:
                pass  # one of a host's processes that ended meanwhile

    return run_and_strike(run, kill)


def run_and_strike(run, strike, timeout=120.0):
    """Calls ``run(train_until_killed, pid_dir)`` and ``strike(rank 1's pid, its parent's pid)``
    once the ranks train. Returns (what run raised, seconds from the strike to it); by then, or
    within seconds, no rank's process may be left."""
    import os
    import signal
    import tempfile
    import threading
    import time

    with tempfile.TemporaryDirectory() as pid_dir:
        struck_at, failed = [], []

        def striker():
            path = os.path.join(pid_dir, "rank1")
            deadline = time.monotonic() + timeout
            while not os.path.exists(path):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            with open(path) as f:
                pid, ppid = (int(x) for x in f.read().split())
            try:
                strike(pid, ppid)
            except BaseException as e:
                failed.append(e)
                os.kill(pid, signal.SIGKILL)  # the run must end all the same
                raise
            struck_at.append(time.monotonic())

        thread = threading.Thread(target=striker, daemon=True)
        thread.start()
        try:
            run(train_until_killed, pid_dir)
        except Exception as e:
            elapsed = time.monotonic() - struck_at[0] if struck_at else None
            thread.join()
            assert not failed, f"the strike on rank 1 failed: {failed[0]!r}"
            assert struck_at, f"the run failed before rank 1 was struck: {e}"
            _assert_gone(pid_dir)
            return e, elapsed
        raise AssertionError("the run survived the strike on rank 1")


def _assert_gone(pid_dir, within=10.0):
    """Every rank's process (pid_dir/rank<r>) has exited within `within` seconds."""
    import os
    import time

    pids = []
    for name in os.listdir(pid_dir):
        if name.startswith("rank") and not name.endswith(".tmp"):
            with open(os.path.join(pid_dir, name)) as f:
                pids.append(int(f.read().split()[0]))
    deadline = time.monotonic() + within
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return
        assert time.monotonic() < deadline, f"rank processes {alive} still run {within} s after the run failed"
        time.sleep(0.1)


def _alive(pid):
    """Whether pid is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
