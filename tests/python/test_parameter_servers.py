"""Parameter servers (docs/parameter_servers.md) under horarun --servers: ps-sync gives every
worker the allreduce's result (checked against numpy), ps-async applies each push on the server
in an order an independent replay reproduces, bounded staleness holds a fast worker back, and a
killed server is named by every worker within seconds. The same for the C++ frontend's
DistributedOptimizer (a worker program built with the tests)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")


# A generous start: importing torch takes seconds, and much longer on a loaded machine.
START = ["--start-timeout", "300"]


def horarun(np_, servers, script, out_dir, *args, timeout=400, knobs=None):
    """`knobs`: hora's variables to set in horarun's environment, which its processes take."""
    return subprocess.run([HORARUN, "-np", str(np_), "--servers", str(servers), *START, sys.executable, str(script),
                           str(out_dir), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(knobs or {})})


# ---- ps-sync against numpy and against allreduce ----

SYNC = textwrap.dedent("""
    import json, sys, numpy as np, torch
    import hora.torch as hvd
    out, steps, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    hvd.init()
    r = hvd.rank()

    def model():
        m = torch.nn.Linear(40, 30)  # weight 1200 elements: split across 2 servers; bias 30
        init = np.random.default_rng(0)
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(init.standard_normal((30, 40)).astype(np.float32)))
            m.bias.copy_(torch.from_numpy(init.standard_normal(30).astype(np.float32)))
        return m

    data = np.random.default_rng(100 + r)
    x = torch.from_numpy(data.standard_normal((8, 40)).astype(np.float32))
    y = torch.from_numpy(data.standard_normal((8, 30)).astype(np.float32))
    result = {}
    # variant plain; "clip": synchronize(), clip, step() under skip_synchronize(); "twice": two
    # backward passes per step (backward_passes_per_step=2), half the batch each. One ps
    # optimizer per job: a worker's servers serve it until it closes.
    for mode in ("ps-sync", "allreduce"):
        m = model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                       named_parameters=m.named_parameters(), mode=mode,
                                       backward_passes_per_step=2 if variant == "twice" else 1,
                                       compression=hvd.Compression.fp16 if variant == "fp16" else hvd.Compression.none)
        for _ in range(steps):
            opt.zero_grad()
            if variant == "twice":
                for half in (slice(0, 4), slice(4, 8)):
                    (torch.nn.functional.mse_loss(m(x[half]), y[half]) / 2).backward()
            else:
                torch.nn.functional.mse_loss(m(x), y).backward()
            if variant == "clip":
                opt.synchronize()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        result[mode] = {"weight": m.weight.detach().numpy().tolist(), "bias": m.bias.detach().numpy().tolist()}
    json.dump(result, open(f"{out}/rank{r}.json", "w"))
""")


def numpy_sync_reference(workers, steps, lr=0.1, momentum=0.9):
    """SGD with momentum on the mean over the workers of a linear layer's MSE gradients."""
    init = np.random.default_rng(0)
    w = init.standard_normal((30, 40)).astype(np.float32).astype(np.float64)
    b = init.standard_normal(30).astype(np.float32).astype(np.float64)
    data = []
    for r in range(workers):
        rng = np.random.default_rng(100 + r)
        data.append((rng.standard_normal((8, 40)).astype(np.float32).astype(np.float64),
                     rng.standard_normal((8, 30)).astype(np.float32).astype(np.float64)))
    return numpy_sgd_on_reduced_gradients(w, b, data, steps, lr, momentum)


def numpy_sgd_on_reduced_gradients(w, b, data, steps, lr, momentum, average=True):
    """SGD with momentum on the mean (or sum) over the workers' (x, y) of a linear layer's MSE
    gradients, in float64."""
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    scale = 1 / len(data) if average else 1
    for _ in range(steps):
        gw, gb = np.zeros_like(w), np.zeros_like(b)
        for x, y in data:
            d = 2 * (x @ w.T + b - y) / y.size
            gw += d.T @ x * scale
            gb += d.sum(0) * scale
        vw, vb = momentum * vw + gw, momentum * vb + gb
        w, b = w - lr * vw, b - lr * vb
    return w, b


@pytest.mark.parametrize("workers,servers,variant", [(2, 1, "plain"), (3, 2, "plain"), (3, 2, "twice"), (2, 1, "clip"),
                                                     (3, 2, "fp16")])
def test_ps_sync_equals_numpy_and_allreduce(tmp_path, workers, servers, variant):
    """The gradients go out from the backward pass's hooks; two backward passes per step, or a
    synchronize() and clipping before step(), give what allreduce gives. fp16: float16 on the
    wire, both ways (allreduce sums in float16, the servers in float32: equal to float16's
    precision)."""
    script = tmp_path / "sync.py"
    script.write_text(SYNC)
    out = horarun(workers, servers, script, tmp_path, 3, variant)
    assert out.returncode == 0, out.stdout + out.stderr
    w, b = numpy_sync_reference(workers, 3)
    for r in range(workers):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        tolerance = 3e-3 if variant == "fp16" else 1e-5  # float16 keeps 11 bits
        for key, reference in (("weight", w), ("bias", b)):
            np.testing.assert_allclose(got["ps-sync"][key], got["allreduce"][key], rtol=tolerance,
                                       atol=tolerance / 10, err_msg=f"rank {r} {variant}")
            if variant != "clip":  # the halves' mean gradient is the whole batch's
                np.testing.assert_allclose(got["ps-sync"][key], reference, rtol=tolerance, atol=tolerance,
                                           err_msg=f"rank {r} {variant}")
        if variant == "fp16":  # and float16 was on the wire: its rounding is seen
            assert np.abs(np.array(got["ps-sync"]["weight"]) - w).max() > 1e-5
        if variant == "clip":
            assert not np.allclose(got["ps-sync"]["weight"], w, atol=1e-4), "clipping changed nothing"


# ---- ps-sync in float64, and float32 beside float64 ----

SYNC64 = textwrap.dedent("""
    import json, sys, numpy as np, torch
    import hora.torch as hvd
    out, steps, bias_dtype = sys.argv[1], int(sys.argv[2]), getattr(torch, sys.argv[3])
    hvd.init()
    r = hvd.rank()
    init = np.random.default_rng(0)
    w0, b0 = init.standard_normal((30, 40)), init.standard_normal(30)
    data = np.random.default_rng(100 + r)
    x, y = torch.from_numpy(data.standard_normal((8, 40))), torch.from_numpy(data.standard_normal((8, 30)))
    result = {}
    for mode in ("ps-sync", "allreduce"):
        # weight float64 (1200 elements: split across 2 servers), bias float64 or float32
        w = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        b = torch.nn.Parameter(torch.from_numpy(b0.copy()).to(bias_dtype))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w, b], lr=0.1, momentum=0.9),
                                       named_parameters=[("w", w), ("b", b)], mode=mode)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.mse_loss(x @ w.T + b, y).backward()  # a float32 bias is promoted
            opt.step()
        result[mode] = {"weight": w.detach().tolist(), "bias": b.detach().double().tolist(),
                        "dtypes": [str(w.dtype), str(b.dtype)]}
    json.dump(result, open(f"{out}/rank{r}.json", "w"))
""")


@pytest.mark.parametrize("workers,servers,bias", [(3, 2, "float64"), (2, 1, "float64"), (2, 2, "float32")])
def test_float64_ps_sync_equals_allreduce_and_numpy_to_float64_precision(tmp_path, workers, servers, bias):
    """A float64 linear layer (SGD with momentum) in ps-sync: the servers sum the float64
    gradients in float64, so the weights equal allreduce's and a float64 numpy replay's to 1e-12
    (a float32 sum would be off by about 1e-8). With a float32 bias beside the float64 weight (a
    server holding both types), the bias is summed in float32 as allreduce sums it: with 2
    workers both sums are exact in the same way, so both parameters equal allreduce's."""
    script = tmp_path / "sync64.py"
    script.write_text(SYNC64)
    steps = 3
    out = horarun(workers, servers, script, tmp_path, steps, bias)
    assert out.returncode == 0, out.stdout + out.stderr
    init = np.random.default_rng(0)
    w0, b0 = init.standard_normal((30, 40)), init.standard_normal(30)
    data = []
    for r in range(workers):
        rng = np.random.default_rng(100 + r)
        data.append((rng.standard_normal((8, 40)), rng.standard_normal((8, 30))))
    w, b = numpy_sgd_on_reduced_gradients(w0, b0, data, steps, 0.1, 0.9)
    for r in range(workers):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["ps-sync"]["dtypes"] == ["torch.float64", f"torch.{bias}"], got["ps-sync"]["dtypes"]
        for key in ("weight", "bias"):
            tolerance = 1e-12 if key == "weight" or bias == "float64" else 1e-6
            np.testing.assert_allclose(got["ps-sync"][key], got["allreduce"][key], rtol=tolerance, atol=tolerance,
                                       err_msg=f"rank {r} {key}")
        if bias == "float64":
            np.testing.assert_allclose(got["ps-sync"]["weight"], w, rtol=1e-11, atol=1e-12, err_msg=f"rank {r}")
            np.testing.assert_allclose(got["ps-sync"]["bias"], b, rtol=1e-11, atol=1e-12, err_msg=f"rank {r}")
        else:  # the float32 bias is seen: the float64 replay misses it by float32's precision
            assert np.abs(np.array(got["ps-sync"]["bias"]) - b).max() > 1e-9
            np.testing.assert_allclose(got["ps-sync"]["bias"], b, rtol=1e-5, atol=1e-5, err_msg=f"rank {r}")


# ---- ps-async: a replay of the server's order ----

ASYNC = textwrap.dedent("""
    import json, os, sys, time, torch
    import hora.torch as hvd
    MOMENTUM = {"sgd": (0.5, 0.25), "sgd_wd": (0.5, 0.25), "rmsprop": (0.9, 0.5)}  # up to step 5, after
    out, steps, mode_arg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    kind = sys.argv[4] if len(sys.argv) > 4 else "sgd"
    compression = hvd.Compression.fp16 if sys.argv[5:6] == ["fp16"] else hvd.Compression.none
    dtype = getattr(torch, sys.argv[6] if len(sys.argv) > 6 else "float32")
    staleness = None if mode_arg == "none" else int(mode_arg)
    hvd.init()
    r = hvd.rank()
    p = torch.nn.Parameter(torch.full((50,), float(r + 1), dtype=dtype))  # the servers start from worker 0's
    inner = {"sgd": lambda: torch.optim.SGD([p], lr=0.05, momentum=0.5),
             "sgd_wd": lambda: torch.optim.SGD([p], lr=0.05, momentum=0.5, weight_decay=0.3),
             "adam": lambda: torch.optim.Adam([p], lr=0.05, betas=(0.8, 0.99), eps=1e-3),
             "adamw": lambda: torch.optim.AdamW([p], lr=0.05, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.3),
             "adagrad": lambda: torch.optim.Adagrad([p], lr=0.05, lr_decay=0.1, eps=1e-3,
                                                    initial_accumulator_value=0.2),
             "rmsprop": lambda: torch.optim.RMSprop([p], lr=0.05, alpha=0.9, eps=1e-3, momentum=0.9,
                                                    centered=True)}[kind]()
    opt = hvd.DistributedOptimizer(inner, named_parameters=[("p", p)], mode="ps-async", max_staleness=staleness,
                                   compression=compression)
    start = p.detach().clone().tolist()
    # A scheduler's changes reach the servers: lr 0.05 / s at step s, SGD's and RMSprop's momentum
    # lowered after step 5.
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1 / (epoch + 1))
    log = []
    for s in range(1, steps + 1):
        if kind in MOMENTUM:
            opt.param_groups[0]["momentum"] = MOMENTUM[kind][s > 5]
        if r == 1:
            time.sleep(0.05)  # the slow worker
            open(f"{out}/slow_begun.tmp", "w").write(str(s))
            os.replace(f"{out}/slow_begun.tmp", f"{out}/slow_begun")  # never seen half written
        g = torch.arange(1, 51, dtype=dtype) * 0.01 * (r + 1) + 0.001 * s
        if s % 2:  # through a backward pass: the hooks push, with the lr and momentum set above
            opt.zero_grad()
            (p * g).sum().backward()
        else:
            p.grad = g
        opt.step()
        schedule.step()
        st = opt.parameter_server_step
        begun = None
        if r == 0 and staleness is not None:
            try:
                begun = int(open(f"{out}/slow_begun").read())
            except FileNotFoundError:  # not written yet: nothing begun
                begun = 0
        log.append({"step": st.step, "slowest": st.slowest, "version": st.version, "slow_begun": begun,
                    "params": p.detach().tolist()})
    json.dump({"start": start, "log": log}, open(f"{out}/rank{r}.json", "w"))
""")


@pytest.mark.parametrize("optimizer,compression", [("sgd", "none"), ("adam", "none"), ("adagrad", "none"),
                                                   ("rmsprop", "none"), ("sgd", "fp16"), ("sgd_wd", "none"),
                                                   ("adamw", "none"), ("rmsprop compensated", "none"),
                                                   ("adam compensated", "none")])
def test_ps_async_matches_a_replay_of_the_servers_order(tmp_path, optimizer, compression):
    """fp16: the pushes travel as float16; the servers apply them in float32 and answer with
    float32 parameters. compensated (HORA_PS_COMPENSATE_MOMENTUM=1): the servers apply momentum
    (Adam: beta1) m - (1 - 1/2), at least 0, where the optimizer asks for m."""
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    steps = 10
    compensated = optimizer.endswith(" compensated")
    optimizer = optimizer.split()[0]
    out = horarun(2, 1, script, tmp_path, steps, "none", optimizer, compression,
                  knobs={"HORA_PS_COMPENSATE_MOMENTUM": "1"} if compensated else None)
    assert out.returncode == 0, out.stdout + out.stderr
    expect_a_replay_of_the_servers_order([json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)],
                                         steps, optimizer=optimizer, fp16=compression == "fp16",
                                         taken_away=0.5 if compensated else 0.0)
    # Momentum 0.9 (RMSprop's) with 2 workers is no hazard: no warning.
    assert "asynchrony alone acts as momentum" not in out.stderr, out.stderr


class TorchServer:
    """What the servers run for the ASYNC script's optimizers, in torch's form, in float64: a push
    of worker step s at lr 0.05 / s, t the server's count of applied pushes. Weight decay 0.3:
    SGD's added to the gradient, AdamW's taken from the parameters first."""

    def __init__(self, optimizer, taken_away=0.0):
        """taken_away: from SGD's and RMSprop's momentum and Adam's beta1 (HORA_PS_COMPENSATE_MOMENTUM)."""
        self.optimizer = optimizer
        self.taken_away = taken_away
        self.v, self.m2, self.mean = np.zeros(50), np.zeros(50), np.zeros(50)
        if optimizer == "adagrad":
            self.m2 += 0.2  # initial_accumulator_value

    def step(self, p, g, s, t):
        lr = 0.05 / s
        if self.optimizer == "sgd_wd":
            g = g + 0.3 * p
        if self.optimizer == "adamw":
            p = p * (1 - lr * 0.3)
        if self.optimizer in ("adam", "adamw"):  # betas 0.8 and 0.99, eps 1e-3
            beta1 = max(0.0, 0.8 - self.taken_away)
            self.v = beta1 * self.v + (1 - beta1) * g
            self.m2 = 0.99 * self.m2 + 0.01 * g * g
            return p - lr / (1 - beta1 ** t) * self.v / (np.sqrt(self.m2 / (1 - 0.99 ** t)) + 1e-3)
        if self.optimizer == "adagrad":  # lr_decay 0.1, eps 1e-3
            self.m2 = self.m2 + g * g
            return p - lr / (1 + (t - 1) * 0.1) * g / (np.sqrt(self.m2) + 1e-3)
        if self.optimizer == "rmsprop":  # alpha 0.9, eps 1e-3, centered, momentum 0.9 then 0.5
            self.m2 = 0.9 * self.m2 + 0.1 * g * g
            self.mean = 0.9 * self.mean + 0.1 * g
            momentum = max(0.0, (0.9 if s <= 5 else 0.5) - self.taken_away)
            self.v = momentum * self.v + g / (np.sqrt(self.m2 - self.mean ** 2) + 1e-3)
            return p - lr * self.v
        self.v = max(0.0, (0.5 if s <= 5 else 0.25) - self.taken_away) * self.v + g  # SGD
        return p - lr * self.v


def replay(pushes, optimizer, fp16, server=None):
    """The servers' parameters after each push (index: its version), from worker 0's; `server`
    (a TorchServer) ends holding the optimizer's state after the last."""
    p, server = np.ones(50), server or TorchServer(optimizer)
    states = [p]
    for version, r, s, _ in pushes:
        g = np.arange(1, 51) * 0.01 * (r + 1) + 0.001 * s
        if fp16:  # the worker's float32 gradient, rounded to float16 on the wire
            g = g.astype(np.float32).astype(np.float16).astype(np.float64)
        p = server.step(p, g, s, version)
        states.append(p)
    return states


def expect_a_replay_of_the_servers_order(runs, steps, held=False, optimizer="sgd", fp16=False, connect_lazily=True,
                                         taken_away=0.0, tolerance=1e-5):
    """Each worker's log (the ASYNC script's) agrees with the servers' optimizer (TorchServer: SGD
    with momentum 0.5, 0.25 after step 5, also with weight decay; Adam; AdamW; Adagrad; centered
    RMSprop with momentum) applying
    every push in the order of the servers' versions, from worker 0's parameters. held (bounded
    staleness): an answer held back carries the parameters of when it was let go, after pushes
    applied since its own. connect_lazily (hora.torch): a worker registers at its first step, so
    the model holds its own start until then; the C++ frontend registers when the optimizer is made.
    tolerance: relative and absolute (float32's 1e-5 by default)."""
    for run in runs:
        assert [e["step"] for e in run["log"]] == list(range(1, steps + 1)), "both workers make progress"
    pushes = sorted((e["version"], r, e["step"], e["params"]) for r, run in enumerate(runs) for e in run["log"])
    assert [v for v, *_ in pushes] == list(range(1, 2 * steps + 1)), "each push applied once"
    server = TorchServer(optimizer, taken_away)
    states = replay(pushes, optimizer, fp16, server)
    if fp16:  # the rounding is seen: the replay of unrounded pushes misses the last answer
        last = max(pushes)
        assert np.abs(np.array(last[3]) - replay(pushes, optimizer, False)[last[0]]).max() > 1e-6
    for version, r, s, params in pushes:
        if held:
            assert any(np.allclose(params, state, rtol=tolerance, atol=tolerance) for state in states[version:]), \
                f"push {version} (worker {r} step {s})"
        else:
            np.testing.assert_allclose(params, states[version], rtol=tolerance, atol=tolerance,
                                       err_msg=f"push {version} (worker {r} step {s})")
    # A worker takes the servers' parameters when it registers: worker 0's, or (a worker that
    # registers later) those after the pushes applied so far.
    for r, run in enumerate(runs):
        if connect_lazily:
            np.testing.assert_array_equal(run["start"], np.full(50, r + 1.0), err_msg=f"worker {r}")
        else:
            assert any(np.allclose(run["start"], state, rtol=tolerance, atol=tolerance) for state in states), \
                f"worker {r}"
    return server


@pytest.mark.parametrize("optimizer,staleness", [("sgd_wd", "none"), ("adam", "none"), ("adamw", "none"),
                                                 ("adagrad", "none"), ("rmsprop", "none"), ("sgd", "1")])
def test_float64_ps_async_matches_a_float64_replay_of_the_servers_order(tmp_path, optimizer, staleness):
    """float64 parameters and gradients: the servers hold, apply and answer them in float64, so
    every answer equals the float64 replay to 1e-12, where applying them in float32 (or rounding
    the lr to float32 on the way) is off by about 1e-7. staleness 1: bounded staleness, whose held
    answers carry the parameters of when they were let go."""
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    steps = 10
    out = horarun(2, 1, script, tmp_path, steps, staleness, optimizer, "none", "float64")
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    expect_a_replay_of_the_servers_order(runs, steps, held=staleness != "none", optimizer=optimizer, tolerance=1e-12)
    # The answers are float64's: a float32 model could not hold them.
    last = np.array(runs[0]["log"][-1]["params"])
    assert (last != last.astype(np.float32).astype(np.float64)).any(), last


def test_bounded_staleness_holds_the_fast_worker(tmp_path):
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    staleness, steps = 1, 8
    out = horarun(2, 2, script, tmp_path, steps, staleness)
    assert out.returncode == 0, out.stdout + out.stderr
    fast = json.loads((tmp_path / "rank0.json").read_text())["log"]
    assert [e["step"] for e in fast] == list(range(1, steps + 1))
    for e in fast:
        assert e["step"] - e["slowest"] <= staleness, e
        # The slow worker's own count of pushes begun bounds what the servers saw of it.
        assert e["step"] - e["slow_begun"] <= staleness, e
    assert max(e["step"] - e["slow_begun"] for e in fast) == staleness, "ran ahead as far as allowed"


# ---- the C++ frontend: hora::torch::DistributedOptimizer's mode (tests/torch/ps_mode_worker.cc) ----

def cpp_worker():
    """The worker program, built with the tests under HORA_BUILD_DIR (default build/release)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, os.environ.get("HORA_BUILD_DIR", "build/release"), "tests", "hora_torch_ps_worker")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built (hora::torch needs libtorch)")
    return path


def cpp_job(workers, servers, *args, timeout=300):
    return subprocess.run([HORARUN, "-np", str(workers), "--servers", str(servers), *START, cpp_worker(),
                           *map(str, args)], capture_output=True, text=True, timeout=timeout)


def sines(n, a, b):
    """The worker's formula data: sin(a * i + b), rounded to float32."""
    return np.sin(np.arange(n) * a + b).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("workers,servers,op", [(2, 1, "average"), (2, 1, "sum"), (3, 2, "average")])
def test_cpp_ps_sync_equals_numpy_and_allreduce(tmp_path, workers, servers, op):
    steps = 3
    out = cpp_job(workers, servers, tmp_path, "sync", op, steps)
    assert out.returncode == 0, out.stdout + out.stderr
    data = [(sines(8 * 40, 0.13, r + 1.0).reshape(8, 40), sines(8 * 30, 0.29, 2.0 * r + 0.5).reshape(8, 30))
            for r in range(workers)]
    w, b = numpy_sgd_on_reduced_gradients(sines(30 * 40, 0.37, 0.1).reshape(30, 40), sines(30, 0.7, 1.3), data,
                                          steps, lr=0.1, momentum=0.9, average=(op == "average"))
    for r in range(workers):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["ps_steps"] == list(range(1, steps + 1))
        for mode in ("ps-sync", "allreduce"):
            np.testing.assert_allclose(np.reshape(got[mode]["weight"], (30, 40)), w, rtol=1e-5, atol=1e-5,
                                       err_msg=f"rank {r} {mode}")
            np.testing.assert_allclose(got[mode]["bias"], b, rtol=1e-5, atol=1e-5, err_msg=f"rank {r} {mode}")


@pytest.mark.parametrize("staleness,optimizer", [(-1, "sgd"), (1, "sgd"), (-1, "adam"), (-1, "adagrad"),
                                                  (-1, "rmsprop"), (-1, "sgd_wd"), (-1, "adamw")])
def test_cpp_ps_async_matches_a_replay_of_the_servers_order(tmp_path, staleness, optimizer):
    steps = 10
    out = cpp_job(2, 1, tmp_path, "async", staleness, steps, optimizer)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    server = expect_a_replay_of_the_servers_order(runs, steps, held=staleness >= 0, optimizer=optimizer,
                                                  connect_lazily=False)
    assert "asynchrony alone acts as momentum" not in out.stderr, out.stderr  # 2 workers: no warning
    # pullServerState() after both workers' last push: the replay's optimizer state, in libtorch's.
    slots = {"adam": [server.v, server.m2], "adamw": [server.v, server.m2], "adagrad": [server.m2],
             "rmsprop": [server.v, server.m2, server.mean]}.get(optimizer, [server.v])
    for r, run in enumerate(runs):
        assert run["state"]["step"] == (0 if optimizer.startswith("sgd") else 2 * steps), run["state"]
        for i, (got, expected) in enumerate(zip(run["state"]["slots"], slots, strict=True)):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6, err_msg=f"worker {r} slot {i}")
    if staleness >= 0:
        for run in runs:
            assert all(e["step"] - e["slowest"] <= staleness for e in run["log"]), run["log"]


@pytest.mark.parametrize("staleness,optimizer", [(-1, "sgd_wd"), (-1, "adam"), (-1, "rmsprop"), (1, "adagrad")])
def test_cpp_float64_ps_async_matches_a_float64_replay_of_the_servers_order(tmp_path, staleness, optimizer):
    """The C++ frontend's float64 parameters: held and applied in float64 on the servers (to
    1e-12 of the float64 replay), and pullServerState() brings their float64 state."""
    steps = 10
    out = cpp_job(2, 1, tmp_path, "async64", staleness, steps, optimizer)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    server = expect_a_replay_of_the_servers_order(runs, steps, held=staleness >= 0, optimizer=optimizer,
                                                  connect_lazily=False, tolerance=1e-12)
    slots = {"adam": [server.v, server.m2], "adagrad": [server.m2],
             "rmsprop": [server.v, server.m2, server.mean]}.get(optimizer, [server.v])
    for r, run in enumerate(runs):
        for i, (got, expected) in enumerate(zip(run["state"]["slots"], slots, strict=True)):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14, err_msg=f"worker {r} slot {i}")
            assert (np.array(got) != np.array(got).astype(np.float32)).any(), f"worker {r} slot {i} is float32's"


# ---- a killed server ----

STEPPING = textwrap.dedent("""
    import signal, sys, time, torch
    import hora.torch as hvd
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stay long enough to report what we saw
    out = sys.argv[1]
    hvd.init()
    r = hvd.rank()
    p = torch.nn.Parameter(torch.ones(1000))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.01), named_parameters=[("p", p)], mode="ps-sync")
    try:
        for s in range(1000000):
            p.grad = torch.ones(1000)
            opt.step()
            if s == 3:
                print("step 3", flush=True)
            time.sleep(0.01)
    except hvd.HoraInternalError as e:
        print(f"rank {r} caught {type(e).__name__} at {time.time():.3f}: {e}", flush=True)
        sys.exit(0)
""")


def server_pid(horarun_pid, index, generation=None):
    """The pid of parameter server `index` among horarun's children (of an elastic job's
    `generation`)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != horarun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"HORA_PS_SERVER_INDEX={index}".encode() in env and \
                (generation is None or f"HORA_PS_GENERATION={generation}".encode() in env):
            return int(entry)
    return None


def test_a_killed_server_is_named_by_every_worker(tmp_path):
    script = tmp_path / "stepping.py"
    script.write_text(STEPPING)
    job = subprocess.Popen([HORARUN, "-np", "2", "--servers", "2", "--grace-seconds", "20", *START, sys.executable,
                            str(script), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = 0
        for line in job.stdout:
            seen += "step 3" in line
            if seen == 2:
                break
        pid = server_pid(job.pid, 1)
        assert pid, "parameter server 1 is not a child of horarun"
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 128 + signal.SIGKILL, stdout + stderr
    assert "parameter server 1 on host" in stderr and "killed by signal 9" in stderr, stderr
    for r in (0, 1):
        lines = [l for l in stdout.splitlines() if f"rank {r} caught" in l]
        assert lines, stdout + stderr
        # The killed server, or server 0 when horarun, stopping the job for server 1's death,
        # stopped server 0 before this rank heard of server 1 (a race: both are named failures).
        assert "PeerError" in lines[0] and re.search(r"parameter server [01] \(host", lines[0]), lines[0]
        caught_at = float(lines[0].split(" at ")[1].split(":")[0])
        assert caught_at - killed_at < 5, f"rank {r} noticed after {caught_at - killed_at:.1f} s"


# ---- a killed worker: async jobs go on, sync jobs stop ----

DYING_WORKER = textwrap.dedent("""
    import json, os, signal, sys, time, torch
    import hora.torch as hvd
    out, mode = sys.argv[1], sys.argv[2]
    hvd.init()
    r = hvd.rank()
    p = torch.nn.Parameter(torch.zeros(1000))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.01), named_parameters=[("p", p)], mode=mode,
                                   max_staleness=2 if mode == "ps-async" else None)
    log = []
    try:
        for step in range(40):
            if r == 2 and step == 10:
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            (p - 1.0).pow(2).sum().backward()  # gradient 2 (p - 1): p goes to 1
            opt.step()
            log.append(list(opt.parameter_server_step[:2]))
            time.sleep(0.02)
        started = time.time()
        try:  # a collective needs every rank: the dead one is named, at once
            hvd.allreduce(torch.ones(1), name="after")
            error = None
        except hvd.HoraInternalError as e:
            error = f"{type(e).__name__}: {e}"
        json.dump({"log": log, "p": p[0].item(), "error": error, "seconds": time.time() - started},
                  open(f"{out}/rank{r}.json", "w"))
    except hvd.HoraInternalError as e:
        print(f"rank {r} caught {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
""")


def test_a_killed_async_worker_does_not_stop_the_others(tmp_path):
    script = tmp_path / "dying.py"
    script.write_text(DYING_WORKER)
    out = horarun(3, 2, script, tmp_path, "ps-async", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 2 on host" in out.stderr and "killed by signal 9" in out.stderr, out.stderr
    assert "its other 2 worker(s) go on without it" in out.stderr, out.stderr
    assert "2 of 3 workers finished" in out.stderr, out.stderr
    assert not (tmp_path / "rank2.json").exists()
    for r in (0, 1):
        run = json.loads((tmp_path / f"rank{r}.json").read_text())
        steps = [s for s, _ in run["log"]]
        assert steps == list(range(1, 41)), run["log"]
        # The staleness gate waited for rank 2 while it lived, then only for the live worker.
        assert all(step - slowest <= 2 for step, slowest in run["log"]), run["log"]
        assert run["log"][-1][1] >= 38, run["log"]
        # 90 or so pushes of 2 (p - 1) at lr 0.01 from 0: p = 1 - 0.98^k, within 0.05 of 1 by then.
        assert 0.8 < run["p"] < 1.0, run["p"]
        assert run["error"] and "PeerError" in run["error"] and "rank 2" in run["error"], run["error"]
        assert run["seconds"] < 5, run


def test_a_killed_sync_worker_stops_the_job(tmp_path):
    script = tmp_path / "dying.py"
    script.write_text(DYING_WORKER)
    out = horarun(3, 1, script, tmp_path, "ps-sync", timeout=300)
    assert out.returncode == 128 + signal.SIGKILL, out.stdout + out.stderr
    assert "rank 2 on host" in out.stderr and "the other ranks were stopped" in out.stderr, out.stderr
    assert "go on without" not in out.stderr, out.stderr


# ---- the servers' optimizer state in a checkpoint (Note [optimizer state] in src/ps/messages.h) ----

CHECKPOINT = textwrap.dedent("""
    import sys, numpy as np, torch
    import hora.torch as hvd
    out, phase, name = sys.argv[1], sys.argv[2], sys.argv[3]
    dtype = getattr(torch, sys.argv[4])
    hvd.init()

    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(40, 30).to(dtype)  # weight 1200 elements: split across 2 servers; bias 30

    def optimizer(m):
        if name == "adam":
            return torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-3)
        if name == "rmsprop":
            return torch.optim.RMSprop(m.parameters(), lr=0.01, alpha=0.9, eps=1e-3, momentum=0.5, centered=True)
        if name == "adamax":
            return torch.optim.Adamax(m.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1)
        if name == "adadelta":
            return torch.optim.Adadelta(m.parameters(), lr=0.5, rho=0.8, eps=1e-4)
        if name == "nadam":
            return torch.optim.NAdam(m.parameters(), lr=0.01, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.1,
                                     momentum_decay=0.05)
        if name == "radam":  # beta2 0.9: the first 5 steps unrectified, the rest rectified
            return torch.optim.RAdam(m.parameters(), lr=0.01, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1)
        return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    data = np.random.default_rng(7)
    batches = [(torch.from_numpy(data.standard_normal((8, 40)).astype(np.float32)).to(dtype),
                torch.from_numpy(data.standard_normal((8, 30)).astype(np.float32)).to(dtype)) for _ in range(10)]

    def train(m, opt, steps):
        for x, y in steps:
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()

    m = model()
    opt = hvd.DistributedOptimizer(optimizer(m), named_parameters=m.named_parameters(), mode="ps-async")
    if phase == "first":
        train(m, opt, batches[:6])
        torch.save({"model": m.state_dict(), "optimizer": opt.state_dict()}, f"{out}/checkpoint.pt")
    else:  # loaded after the optimizer was made, as Horovod's examples resume
        checkpoint = torch.load(f"{out}/checkpoint.pt")
        m.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        train(m, opt, batches[6:])
        torch.save(m.state_dict(), f"{out}/resumed.pt")
        # What plain torch computes: 10 steps in one go, and 6 + 4 with a fresh optimizer.
        reference = model()
        train(reference, optimizer(reference), batches)
        restarted = model()
        restarted.load_state_dict(checkpoint["model"])
        train(restarted, optimizer(restarted), batches[6:])
        six = model()
        six_optimizer = optimizer(six)
        train(six, six_optimizer, batches[:6])
        torch.save({"through": reference.state_dict(), "restarted": restarted.state_dict(),
                    "optimizer after 6": six_optimizer.state_dict()}, f"{out}/reference.pt")
""")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam", "rmsprop", "adamax", "adadelta", "nadam", "radam"])
def test_a_ps_async_checkpoint_holds_the_servers_optimizer_state(tmp_path, optimizer, dtype):
    """One worker (so the servers apply the pushes in its order), two servers: the optimizer's
    state_dict() after 6 steps is torch's own optimizer's after the same steps (pulled from the
    servers), and a second job that loads the checkpoint goes on as if never stopped (so, for Adamax,
    Adadelta, NAdam and RAdam, which no other test replays, the servers' updates are torch's),
    where a fresh optimizer would not. float64: the model, the servers and the checkpoint's state
    are float64, equal to torch's float64 optimizer to 1e-10 (float32 arithmetic anywhere on the way
    would be off by about 1e-7)."""
    torch = pytest.importorskip("torch")
    script = tmp_path / "checkpoint.py"
    script.write_text(CHECKPOINT)
    for phase in ("first", "resume"):
        out = horarun(1, 2, script, tmp_path, phase, optimizer, dtype)
        assert out.returncode == 0, out.stdout + out.stderr
    checkpoint = torch.load(tmp_path / "checkpoint.pt")
    state = checkpoint["optimizer"]["state"]
    assert sorted(state) == [0, 1]
    keys = {"sgd": {"momentum_buffer"}, "adam": {"step", "exp_avg", "exp_avg_sq"},
            "rmsprop": {"step", "square_avg", "momentum_buffer", "grad_avg"},
            "adamax": {"step", "exp_avg", "exp_inf"}, "adadelta": {"step", "square_avg", "acc_delta"},
            "nadam": {"step", "exp_avg", "exp_avg_sq", "mu_product"}, "radam": {"step", "exp_avg", "exp_avg_sq"}}[optimizer]
    assert all(set(s) == keys for s in state.values()), state
    resumed = torch.load(tmp_path / "resumed.pt")
    reference = torch.load(tmp_path / "reference.pt")
    torch_state = reference["optimizer after 6"]["state"]
    rtol, atol = (1e-10, 1e-12) if dtype == "float64" else (1e-4, 1e-6)
    if optimizer == "nadam" and dtype == "float64":
        # torch's NAdam keeps its product of momenta in a float32 tensor (torch.tensor(1.)) for
        # float64 parameters too, so its own float64 updates are float32's to about 1e-6; the
        # servers' product is float64 (PsNadam checks it against a float64 replay).
        rtol, atol = 1e-5, 1e-7
    for index, s in state.items():
        for key in keys:
            counts = key in ("step", "mu_product")  # torch's own, float32 tensors whatever the parameters' dtype
            if not counts:
                assert s[key].dtype == getattr(torch, dtype), (key, s[key].dtype)
            np.testing.assert_allclose(np.asarray(s[key]), np.asarray(torch_state[index][key]),
                                       rtol=1e-6 if counts else rtol, atol=atol, err_msg=f"{key} of parameter {index}")
    for key in ("weight", "bias"):
        assert resumed[key].dtype == getattr(torch, dtype)
        np.testing.assert_allclose(resumed[key].numpy(), reference["through"][key].numpy(), rtol=rtol, atol=10 * atol)
        assert not np.allclose(resumed[key].numpy(), reference["restarted"][key].numpy(), rtol=1e-4, atol=1e-5)


COMPENSATED_NADAM = textwrap.dedent("""
    import json, sys, torch
    import hora.torch as hvd
    out = sys.argv[1]
    hvd.init()
    p = torch.nn.Parameter(torch.ones(20))
    opt = hvd.DistributedOptimizer(torch.optim.NAdam([p], lr=0.01, betas=(0.8, 0.99), momentum_decay=0.05),
                                   named_parameters=[("p", p)], mode="ps-async")
    for s in range(6):
        opt.zero_grad()
        (p * (hvd.rank() + 1)).sum().backward()
        opt.step()
    hvd.barrier()  # both workers' 6 pushes applied
    state = opt.state_dict()["state"][0]
    json.dump({"step": float(state["step"]), "mu_product": float(state["mu_product"])},
              open(f"{out}/rank{hvd.rank()}.json", "w"))
""")


def test_compensated_nadam_writes_the_product_of_the_momenta_the_servers_applied(tmp_path):
    """HORA_PS_COMPENSATE_MOMENTUM=1 with 2 workers: the servers run NAdam with beta1 0.8 - 1/2;
    the mu_product a checkpoint holds is the product of those momenta, not of the user's."""
    script = tmp_path / "nadam.py"
    script.write_text(COMPENSATED_NADAM)
    out = horarun(2, 1, script, tmp_path, knobs={"HORA_PS_COMPENSATE_MOMENTUM": "1"})
    assert out.returncode == 0, out.stdout + out.stderr

    def product(beta1, steps):
        return np.prod([beta1 * (1 - 0.5 * 0.96 ** (t * 0.05)) for t in range(1, steps + 1)])

    for r in range(2):
        state = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert state["step"] == 12, state
        assert state["mu_product"] == pytest.approx(product(0.3, 12), rel=1e-6), state
        assert state["mu_product"] != pytest.approx(product(0.8, 12), rel=1e-2), state


# ---- float16 and bfloat16 parameters: float32 on the servers ----

HALF = textwrap.dedent("""
    import json, sys, torch
    import hora.torch as hvd
    out, mode, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
    hvd.init()
    r = hvd.rank()
    p = torch.nn.Parameter(torch.ones(64, dtype=dtype))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), named_parameters=[("p", p)], mode=mode)
    g = (torch.arange(1, 65, dtype=torch.float64) * torch.finfo(dtype).eps / 8 * (r + 1)).to(dtype)
    grads = []
    for s in range(10):
        opt.zero_grad()
        if s % 2:  # the hooks' path (twice the gradient) and synchronize()'s
            (p * g * 2).sum().backward()
        else:
            p.grad = g.clone()
        opt.synchronize()
        grads.append(p.grad.double().tolist())
        with opt.skip_synchronize():
            opt.step()
    hvd.barrier()  # every push applied: a last push of nothing brings the servers' parameters
    opt.zero_grad()
    p.grad = torch.zeros_like(p)
    opt.step()
    json.dump({"grads": grads, "params": p.double().tolist()}, open(f"{out}/rank{r}.json", "w"))
""")


@pytest.mark.parametrize("mode", ["ps-sync", "ps-async"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("frontend", ["python", "cpp"])
def test_half_precision_parameters_meet_float32_on_the_servers(tmp_path, frontend, mode, dtype):
    """2 workers, SGD (lr 0.1) on a float16 or bfloat16 parameter of ones; gradients k x eps / 8 x
    (rank + 1), twice that at odd steps, k = 1..64 (eps: the dtype's spacing at 1).
    - ps-sync: every worker's .grad is the mean rounded to the parameter's dtype (exact: two such
      values add exactly in float32), and the parameters step in their dtype as torch steps them.
    - ps-async: the servers' float32 master weights take all 20 pushes, so the parameters end at 1
      - 0.1 x their sum, rounded once, where pushes applied in the parameter's dtype leave the
      smallest entries (k < 5) at exactly 1.
    The C++ frontend runs the same steps (its worker's `half` mode)."""
    torch = pytest.importorskip("torch")
    if frontend == "python":
        script = tmp_path / "half.py"
        script.write_text(HALF)
        out = horarun(2, 1, script, tmp_path, mode, dtype)
    else:
        out = cpp_job(2, 1, tmp_path, "half", mode, dtype)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    dt = getattr(torch, dtype)
    g = [torch.arange(1, 65, dtype=torch.float64) * torch.finfo(dt).eps / 8 * (r + 1) for r in range(2)]
    factors = [1 + s % 2 for s in range(10)]
    if mode == "ps-sync":
        reference = torch.ones(64, dtype=dt)
        means = []
        for f in factors:
            means.append(((g[0] + g[1]) * f / 2).to(dt))
            reference.add_(means[-1], alpha=-0.1)
        for run in runs:
            assert run["grads"] == [m.double().tolist() for m in means]
            assert run["params"] == reference.double().tolist()
        return
    expected = (1 - 0.1 * sum(factors) * (g[0] + g[1])).to(dt).double()
    in_dtype = torch.ones(64, dtype=dt)
    for f in factors:
        for gr in g:
            in_dtype.add_((gr * f).to(dt), alpha=-0.1)
    for run in runs:
        params = torch.tensor(run["params"], dtype=torch.float64)
        assert (params - expected).abs().max().item() <= torch.finfo(dt).eps, (params, expected)
        # Where a single push is under half the dtype's spacing, only the float32 masters move.
        unmoved = in_dtype.double() == 1
        assert unmoved[:4].all() and (params[unmoved] < 1).all(), (params, in_dtype)


# ---- arguments, without a job ----

def test_mode_arguments_are_checked():
    torch = pytest.importorskip("torch")
    import hora.torch as hvd
    p = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="mode must be one of"):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), mode="ps")
    with pytest.raises(ValueError, match="max_staleness bounds mode='ps-async' only"):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), mode="ps-sync", max_staleness=2)
    with pytest.raises(ValueError, match="Adadelta, NAdam or RAdam on the servers"):
        hvd.DistributedOptimizer(torch.optim.Rprop([p]), mode="ps-async")
    with pytest.raises(ValueError, match="Adamax has no maximize"):
        hvd.DistributedOptimizer(torch.optim.Adamax([p], maximize=True), mode="ps-async")
    with pytest.raises(ValueError, match="AdamW has no amsgrad"):
        hvd.DistributedOptimizer(torch.optim.AdamW([p], amsgrad=True), mode="ps-async")
    with pytest.raises(ValueError, match="RMSprop has no maximize"):
        hvd.DistributedOptimizer(torch.optim.RMSprop([p], maximize=True), mode="ps-async")
    with pytest.raises(ValueError, match="SGD has no maximize"):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1, maximize=True), mode="ps-async")
    q = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="every param group must have the same lr, alpha, eps, momentum, centered"):
        hvd.DistributedOptimizer(torch.optim.RMSprop([{"params": [p]}, {"params": [q], "centered": True}]),
                                 mode="ps-async")
    with pytest.raises(ValueError, match="must have the same lr, betas, eps, weight_decay"):  # one decay per shard
        hvd.DistributedOptimizer(torch.optim.AdamW([{"params": [p]}, {"params": [q], "weight_decay": 0.0}]),
                                 mode="ps-async")
    with pytest.raises(ValueError, match="Adam has no amsgrad"):
        hvd.DistributedOptimizer(torch.optim.Adam([p], amsgrad=True), mode="ps-async")
    with pytest.raises(ValueError, match="takes float32, float64, float16 or bfloat16 CPU parameters.*p is "
                                         "torch.complex64"):
        c = torch.nn.Parameter(torch.ones(3, dtype=torch.complex64))
        hvd.DistributedOptimizer(torch.optim.SGD([c], lr=0.1), named_parameters=[("p", c)], mode="ps-sync")
    d = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="Compression.fp16 takes float32, float16 or bfloat16 parameters; .*d is "
                                         "float64"):
        hvd.DistributedOptimizer(torch.optim.SGD([p, d], lr=0.1), named_parameters=[("p", p), ("d", d)],
                                 mode="ps-async", compression=hvd.Compression.fp16)
    with pytest.raises(ValueError, match="has no nesterov"):
        hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True), mode="ps-async")


# ---- the hazard of momentum in ps-async (docs/parameter_servers.md, "ps-async and momentum") ----

def test_the_momentum_warning_comes_once_and_from_rank_0(monkeypatch):
    import warnings
    from hora.common import parameter_servers
    monkeypatch.setattr(parameter_servers, "_warned_of_momentum", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not parameter_servers.warn_of_async_momentum(0.9, workers=4, rank=1)
        assert not parameter_servers.warn_of_async_momentum(0.5, workers=8, rank=0)
        assert not parameter_servers.warn_of_async_momentum(0.95, workers=3, rank=0)
        assert parameter_servers.warn_of_async_momentum(0.9, workers=4, rank=0)
        assert not parameter_servers.warn_of_async_momentum(0.99, workers=8, rank=0)  # once per process
    assert [str(w.message) for w in caught] == [
        'ps-async with 4 workers and momentum 0.9: asynchrony alone acts as momentum of about 1 - 1/4 = 0.75, and '
        'the two compound (8 workers with momentum 0.9 collapsed to a constant output where 0.5 converged); '
        'consider a momentum of 0.5 or less, a smaller lr, or HORA_PS_COMPENSATE_MOMENTUM=1. See '
        'docs/parameter_servers.md, section '
        '"ps-async and momentum: why 8 workers collapsed"']


@pytest.mark.parametrize("optimizer,workers,momentum,warns", [
    ("SGD", 4, 0.9, True), ("RMSprop", 8, 0.95, True), ("SGD", 2, 0.9, False), ("RMSprop", 4, 0.5, False),
    ("Adam", 8, 0.0, False)])
def test_ps_async_warns_of_momentum_with_many_workers(monkeypatch, optimizer, workers, momentum, warns):
    """As rank 0 of a job of N workers: the warning comes when the optimizer is made, before it
    connects (no job here: connecting then fails)."""
    torch = pytest.importorskip("torch")
    import warnings
    import hora.torch as hvd
    from hora.common import basics, parameter_servers
    monkeypatch.setattr(basics, "size", lambda: workers)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    monkeypatch.setattr(parameter_servers, "_warned_of_momentum", False)
    monkeypatch.delenv("HORA_PS_SERVERS", raising=False)
    p = torch.nn.Parameter(torch.ones(3))
    inner = getattr(torch.optim, optimizer)([p], lr=0.1, **({"momentum": momentum} if momentum else {}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception, match="no parameter servers"):
            hvd.DistributedOptimizer(inner, mode="ps-async")
    messages = [str(w.message) for w in caught if "asynchrony alone acts as momentum" in str(w.message)]
    if warns:
        assert len(messages) == 1, messages
        assert f"{workers} workers and momentum {momentum:g}" in messages[0] and f"1 - 1/{workers}" in messages[0]
        assert caught[0].filename == __file__, "the warning points at the user's line"
    else:
        assert not messages, messages


def test_ps_async_warns_of_momentum_once_in_a_job_of_4(tmp_path):
    """RMSprop with momentum 0.9 and 4 workers: rank 0 warns, once (at construction; not again at
    each push)."""
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    out = horarun(4, 1, script, tmp_path, 2, "none", "rmsprop")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr.count("asynchrony alone acts as momentum of about 1 - 1/4 = 0.75") == 1, out.stderr


def test_ps_async_does_not_warn_of_momentum_it_compensates(tmp_path):
    """HORA_PS_COMPENSATE_MOMENTUM=1: RMSprop with momentum 0.9 and 4 workers, applied as 0.15 by
    the servers, is no hazard to warn of."""
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    out = horarun(4, 1, script, tmp_path, 2, "none", "rmsprop", knobs={"HORA_PS_COMPENSATE_MOMENTUM": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "asynchrony alone acts as momentum" not in out.stderr, out.stderr


@pytest.mark.parametrize("optimizer,warns", [("rmsprop", True), ("sgd", False)])
def test_cpp_ps_async_warns_of_momentum_with_4_workers(tmp_path, optimizer, warns):
    """The C++ frontend's log line on rank 0: RMSprop's momentum 0.9 with 4 workers; SGD's 0.5 not."""
    out = cpp_job(4, 1, tmp_path, "async", -1, 3, optimizer)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stderr.count("asynchrony alone acts as momentum of about 1 - 1/4 = 0.75") == (1 if warns else 0), \
        out.stderr
