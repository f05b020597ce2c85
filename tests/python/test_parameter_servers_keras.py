"""Parameter servers from hora.tensorflow.keras (docs/parameter_servers.md) under horarun --servers,
under each Keras generation installed: ps-sync in model.fit gives what allreduce and numpy give,
and ps-async in a custom loop follows an independent replay of the order the server applied the
pushes in, with Keras' SGD at each step's learning rate (a schedule's, or one set between steps)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_parameter_servers import HORARUN, START, numpy_sync_reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Keras 2 (this venv's TensorFlow 2.15) and, when set up, Keras 3 (.venv-tf2's newest TensorFlow).
PYTHONS = [sys.executable] + [p for p in [os.path.join(ROOT, ".venv-tf2", "bin", "python")] if os.path.exists(p)]


def keras_job(python, workers, servers, script, out_dir, *args):
    return subprocess.run([HORARUN, "-np", str(workers), "--servers", str(servers), *START, python, str(script),
                           str(out_dir), *map(str, args)], capture_output=True, text=True, timeout=400)


# The torch test's linear layer and data (numpy_sync_reference), as a Keras Dense layer whose
# kernel is the transposed weight; one batch of 8 per step, 3 steps.
SYNC = textwrap.dedent("""
    import json, sys, numpy as np, tensorflow as tf
    import hora.tensorflow.keras as hvd
    out, steps = sys.argv[1], int(sys.argv[2])
    compression = hvd.Compression.fp16 if sys.argv[3] == "fp16" else hvd.Compression.none
    dtype = sys.argv[4]  # float64: the model's variables (tf.keras.backend.set_floatx) and data
    tf.keras.backend.set_floatx(dtype)
    hvd.init()
    r = hvd.rank()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    init = np.random.default_rng(0)
    w = init.standard_normal((30, 40)).astype(np.float32).astype(dtype)
    b = init.standard_normal(30).astype(np.float32).astype(dtype)
    data = np.random.default_rng(100 + r)
    x = data.standard_normal((8, 40)).astype(np.float32).astype(dtype)
    y = data.standard_normal((8, 30)).astype(np.float32).astype(dtype)
    result = {}
    for mode in ("ps-sync", "allreduce"):
        model = tf.keras.Sequential([tf.keras.Input((40,)), tf.keras.layers.Dense(30)])
        model.layers[0].set_weights([w.T, b])
        opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), mode=mode,
                                       compression=compression)
        model.compile(optimizer=opt, loss="mse")
        model.fit(x, y, batch_size=8, epochs=steps, shuffle=False, verbose=0)
        kernel, bias = model.layers[0].get_weights()
        result[mode] = {"weight": kernel.T.tolist(), "bias": bias.tolist(), "dtype": str(kernel.dtype)}
    json.dump(result, open(f"{out}/rank{r}.json", "w"))
""")


@pytest.mark.parametrize("compression,dtype", [("none", "float32"), ("fp16", "float32"), ("none", "float64")])
@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p))))
def test_keras_ps_sync_in_fit_equals_numpy_and_allreduce(tmp_path, python, compression, dtype):
    """fp16: float16 on the wire both ways, within float16's precision of the reference, and its
    rounding seen. float64 (set_floatx): the servers sum in float64, so ps-sync's weights equal
    allreduce's to 1e-12 (a float32 sum is off by about 1e-8). Keras' own float64 SGD is not
    float64-exact (Keras 2's applies its momentum rounded to float32: 0.9 as 0.89999998), so
    against the float64 numpy reference both modes agree to 1e-7 only."""
    script = tmp_path / "sync.py"
    script.write_text(SYNC)
    workers, servers = 2, 2  # the kernel (1200 elements) is split across both servers
    out = keras_job(python, workers, servers, script, tmp_path, 3, compression, dtype)
    assert out.returncode == 0, out.stdout + out.stderr
    w, b = numpy_sync_reference(workers, 3)
    tolerance = 3e-3 if compression == "fp16" else 1e-7 if dtype == "float64" else 1e-5
    for r in range(workers):
        got = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert got["ps-sync"]["dtype"] == dtype
        if dtype == "float64":
            for key in ("weight", "bias"):
                np.testing.assert_allclose(got["ps-sync"][key], got["allreduce"][key], rtol=1e-12, atol=1e-12,
                                           err_msg=f"rank {r} {key}")
        for mode in ("ps-sync", "allreduce"):
            np.testing.assert_allclose(got[mode]["weight"], w, rtol=tolerance, atol=tolerance, err_msg=f"rank {r} {mode}")
            np.testing.assert_allclose(got[mode]["bias"], b, rtol=tolerance, atol=tolerance, err_msg=f"rank {r} {mode}")
        if compression == "fp16":
            assert np.abs(np.array(got["ps-sync"]["weight"]) - w).max() > 1e-5


KINDS = ("sgd-wd", "adam", "adamw", "adagrad", "rmsprop", "rmsprop-plain", "adamax", "adadelta",
         "nadam")  # the last word of lr, else SGD
ASYNC = textwrap.dedent("""
    KINDS = @KINDS@
    import json, sys, tensorflow as tf
    import hora.tensorflow.keras as hvd
    out, steps, lr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dtype = tf.as_dtype(sys.argv[4] if len(sys.argv) > 4 else "float32")
    hvd.init()
    r = hvd.rank()
    p = tf.Variable(tf.fill([50], tf.constant(float(r + 1), dtype)))  # the server starts from worker 0's
    # The learning rate of step s is 0.05 / s: a schedule's, or set before each step (as a callback
    # does); either reaches the servers.
    schedule = tf.keras.optimizers.schedules.InverseTimeDecay(0.05, decay_steps=1, decay_rate=1.0)
    rate = schedule if lr.startswith("schedule") else 0.05
    optimizers = tf.keras.optimizers.legacy if "legacy" in lr else tf.keras.optimizers  # Keras 2's OptimizerV2
    inner = {"sgd": lambda: optimizers.SGD(rate, momentum=0.5),
             "sgd-wd": lambda: optimizers.SGD(rate, momentum=0.5, weight_decay=0.3),
             "adam": lambda: optimizers.Adam(rate, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
             "adamw": lambda: optimizers.AdamW(rate, weight_decay=0.3, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
             "adagrad": lambda: optimizers.Adagrad(rate, initial_accumulator_value=0.2, epsilon=1e-3),
             "rmsprop": lambda: optimizers.RMSprop(rate, rho=0.9, momentum=0.5, epsilon=1e-3, centered=True),
             "rmsprop-plain": lambda: optimizers.RMSprop(rate, rho=0.9, epsilon=1e-3, centered=True),
             "adamax": lambda: optimizers.Adamax(rate, beta_1=0.8, beta_2=0.99, epsilon=0.05),
             "adadelta": lambda: optimizers.Adadelta(rate, rho=0.9, epsilon=1e-3),
             "nadam": lambda: optimizers.Nadam(rate, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
             }[lr.split()[-1] if lr.split()[-1] in KINDS else "sgd"]()
    opt = hvd.DistributedOptimizer(inner, mode="ps-async")
    log = []
    for s in range(1, steps + 1):
        if lr.startswith("set"):
            opt.learning_rate = 0.05 / s
        g = tf.range(1, 51, dtype=dtype) * 0.01 * (r + 1) + 0.001 * s
        opt.apply_gradients([(g, p)])
        st = opt.parameter_server_step
        log.append({"step": st.step, "version": st.version, "params": p.numpy().tolist()})
    json.dump({"log": log, "iterations": int(opt.iterations.numpy())}, open(f"{out}/rank{r}.json", "w"))
""").replace("@KINDS@", repr(KINDS))


class KerasServer:
    """What the servers run for the ASYNC script's Keras optimizers, in float64: a push of worker
    step s at lr 0.05 / s, t the server's count of applied pushes. Keras 2's legacy Adagrad, and its
    RMSprop without momentum, run TensorFlow's kernels and their own update, with epsilon beside
    the root (as torch); its RMSprop with momentum runs TensorFlow's RMSProp kernel, as Keras'.
    weight_decay (0.3, AdamW's and SGD's): p -= p wd lr before the update."""

    def __init__(self, lr, rate=lambda s: 0.05 / s):
        """rate: the learning rate of step s."""
        self.rate = rate
        self.legacy = "legacy" in lr
        self.kind = lr.split()[-1] if lr.split()[-1] in KINDS else "sgd"
        self.v, self.m2, self.mean = np.zeros(50), np.zeros(50), np.zeros(50)
        self.product = 1.0  # Nadam's product of momenta
        if self.kind == "adagrad":
            self.m2 += 0.2  # initial_accumulator_value

    def step(self, p, g, s, t):
        lr = self.rate(s)
        if self.kind in ("sgd-wd", "adamw"):
            p = p - p * 0.3 * lr
        if self.kind in ("adam", "adamw"):  # epsilon hat: beside sqrt(v), before the bias correction
            self.v = self.v + (g - self.v) * 0.2
            self.m2 = self.m2 + (g * g - self.m2) * 0.01
            return p - lr * np.sqrt(1 - 0.99 ** t) / (1 - 0.8 ** t) * self.v / (np.sqrt(self.m2) + 1e-3)
        if self.kind == "adamax":  # epsilon beside the infinity norm (torch's is inside it)
            self.v = self.v + (g - self.v) * 0.2
            self.m2 = np.maximum(0.99 * self.m2, np.abs(g))
            return p - lr / (1 - 0.8 ** t) * self.v / (self.m2 + 0.05)
        if self.kind == "nadam":  # the momentum at step t: beta_1 (1 - 0.96^t / 2)
            u, u_next = (0.8 * (1 - 0.5 * 0.96 ** k) for k in (t, t + 1))
            self.product *= u
            self.v = self.v + (g - self.v) * 0.2
            self.m2 = self.m2 + (g * g - self.m2) * 0.01
            m_hat = u_next * self.v / (1 - self.product * u_next) + (1 - u) * g / (1 - self.product)
            return p - lr * m_hat / (np.sqrt(self.m2 / (1 - 0.99 ** t)) + 1e-3)
        if self.kind == "adadelta":  # rho 0.9; self.v holds the mean square of the updates
            self.m2 = 0.9 * self.m2 + 0.1 * g * g
            delta = np.sqrt(self.v + 1e-3) / np.sqrt(self.m2 + 1e-3) * g
            self.v = 0.9 * self.v + 0.1 * delta * delta
            return p - lr * delta
        if self.kind == "adagrad":
            self.m2 = self.m2 + g * g
            root = np.sqrt(self.m2) + 1e-3 if self.legacy else np.sqrt(self.m2 + 1e-3)
            return p - lr * g / root
        if self.kind.startswith("rmsprop"):  # rho 0.9, centered
            self.m2 = 0.9 * self.m2 + 0.1 * g * g
            self.mean = 0.9 * self.mean + 0.1 * g
            variance = self.m2 - self.mean ** 2
            if self.legacy and self.kind == "rmsprop-plain":
                return p - lr * g / (np.sqrt(variance) + 1e-3)
            self.v = (0.5 if self.kind == "rmsprop" else 0.0) * self.v + lr * g / np.sqrt(variance + 1e-3)
            return p - self.v
        self.v = 0.5 * self.v - lr * g  # SGD: v = m v - lr g; p += v
        return p + self.v


@pytest.mark.parametrize("lr", ["schedule", "set", "schedule adam", "set adam", "schedule legacy",
                                "schedule legacy adam", "schedule adagrad", "schedule rmsprop", "set rmsprop",
                                "schedule legacy adagrad", "schedule legacy rmsprop",
                                "schedule legacy rmsprop-plain", "schedule adamw", "set sgd-wd", "schedule adamax",
                                "set adadelta", "schedule legacy adamax", "schedule legacy adadelta",
                                "schedule nadam"])
@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p))))
def test_keras_ps_async_matches_a_replay_of_the_servers_order(tmp_path, python, lr):
    if "legacy" in lr and python != sys.executable:
        pytest.skip("Keras 3 has no legacy optimizers")
    if "nadam" in lr and python == sys.executable:
        pytest.skip("the servers run Keras 3's Nadam only")
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    steps = 6
    out = keras_job(python, 2, 1, script, tmp_path, steps, lr)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for run in runs:
        assert [e["step"] for e in run["log"]] == list(range(1, steps + 1))
        assert run["iterations"] == steps
    pushes = sorted((e["version"], r, e["step"], e["params"]) for r, run in enumerate(runs) for e in run["log"])
    assert [v for v, *_ in pushes] == list(range(1, 2 * steps + 1)), "each push applied once"
    p, server = np.ones(50), KerasServer(lr)  # worker 0's values start the server
    for version, r, s, params in pushes:
        p = server.step(p, np.arange(1, 51) * 0.01 * (r + 1) + 0.001 * s, s, version)
        np.testing.assert_allclose(params, p, rtol=1e-5, atol=1e-5, err_msg=f"push {version} (worker {r} step {s})")
    assert "asynchrony alone acts as momentum" not in out.stderr, out.stderr  # 2 workers: no warning


@pytest.mark.parametrize("lr", ["set", "set adam", "set rmsprop", "set adagrad"])
@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p))))
def test_keras_float64_ps_async_matches_a_float64_replay_of_the_servers_order(tmp_path, python, lr):
    """float64 variables and gradients: the servers apply and answer in float64, so each answer
    equals the float64 replay to 1e-12 (float32 arithmetic is off by about 1e-7). Keras holds the
    learning rate as a float32 variable and casts it to the variable's dtype, so the replay's lr is
    0.05 / s rounded to float32, as the servers receive it."""
    script = tmp_path / "async.py"
    script.write_text(ASYNC)
    steps = 6
    out = keras_job(python, 2, 1, script, tmp_path, steps, lr, "float64")
    assert out.returncode == 0, out.stdout + out.stderr
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    pushes = sorted((e["version"], r, e["step"], e["params"]) for r, run in enumerate(runs) for e in run["log"])
    assert [v for v, *_ in pushes] == list(range(1, 2 * steps + 1)), "each push applied once"
    p, server = np.ones(50), KerasServer(lr, rate=lambda s: float(np.float32(0.05 / s)))
    if "adagrad" in lr and python != sys.executable:
        # Keras 3 starts a float64 accumulator from its float32 constant: 0.2 rounded to float32,
        # which the registration carries to the servers as it is.
        server.m2[:] = float(np.float32(0.2))
    for version, r, s, params in pushes:
        p = server.step(p, np.arange(1, 51) * 0.01 * (r + 1) + 0.001 * s, s, version)
        np.testing.assert_allclose(params, p, rtol=1e-12, atol=1e-12, err_msg=f"push {version} (worker {r} step {s})")
    assert (p != p.astype(np.float32).astype(np.float64)).any()


def test_keras_mode_arguments_are_checked():
    tf = pytest.importorskip("tensorflow")
    import hora.tensorflow.keras as hvd
    from hora._keras.keras_version import keras_generation
    with pytest.raises(ValueError, match="mode must be one of"):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), mode="ps")
    with pytest.raises(ValueError, match="runs SGD, Adam, AdamW, Adagrad, RMSprop, Adamax, Adadelta or Nadam on the "
                                         "servers, not Ftrl"):
        hvd.DistributedOptimizer(tf.keras.optimizers.Ftrl(), mode="ps-async")
    if keras_generation(tf.keras.optimizers.Nadam) == 2:  # its momentum product advances once per variable
        for nadam in (tf.keras.optimizers.Nadam(), tf.keras.optimizers.legacy.Nadam()):
            with pytest.raises(ValueError, match="runs Keras 3's Nadam on the servers, not Keras 2's"):
                hvd.DistributedOptimizer(nadam, mode="ps-async")
    with pytest.raises(ValueError, match="RMSprop has no clipnorm"):
        hvd.DistributedOptimizer(tf.keras.optimizers.RMSprop(clipnorm=1.0), mode="ps-async")
    excluding = tf.keras.optimizers.AdamW(weight_decay=0.01)
    excluding.exclude_from_weight_decay(var_names=["bias"])
    with pytest.raises(ValueError, match=r"AdamW.exclude_from_weight_decay\(\) cannot be honoured"):
        hvd.DistributedOptimizer(excluding, mode="ps-async")
    undecayed = tf.keras.optimizers.Adam(0.01)
    undecayed.exclude_from_weight_decay(var_names=["bias"])  # no weight decay: nothing is excluded
    hvd.DistributedOptimizer(undecayed, mode="ps-async")
    with pytest.raises(ValueError, match="Adam has no amsgrad"):
        hvd.DistributedOptimizer(tf.keras.optimizers.Adam(amsgrad=True), mode="ps-async")
    with pytest.raises(ValueError, match="has no nesterov"):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), mode="ps-async")
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), mode="ps-sync", backward_passes_per_step=2)


@pytest.mark.parametrize("kind,workers,momentum,warns", [("SGD", 4, 0.9, True), ("RMSprop", 8, 0.95, True),
                                                         ("SGD", 2, 0.9, False), ("RMSprop", 4, 0.5, False)])
def test_keras_ps_async_warns_of_momentum_with_many_workers(monkeypatch, kind, workers, momentum, warns):
    """Asynchrony acts as momentum of about 1 - 1/N: with N >= 4 workers an explicit momentum >= 0.9
    is warned of, once, when the optimizer is made (here as rank 0 of a job of N; it connects
    only at its first step, so no job is needed)."""
    tf = pytest.importorskip("tensorflow")
    import warnings
    import hora.tensorflow.keras as hvd
    from hora.common import basics, parameter_servers
    monkeypatch.setattr(basics, "size", lambda: workers)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    monkeypatch.setattr(parameter_servers, "_warned_of_momentum", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hvd.DistributedOptimizer(getattr(tf.keras.optimizers, kind)(0.01, momentum=momentum), mode="ps-async")
    messages = [str(w.message) for w in caught if "asynchrony alone acts as momentum" in str(w.message)]
    if warns:
        assert len(messages) == 1, messages
        assert f"{workers} workers and momentum {momentum:g}" in messages[0] and f"1 - 1/{workers}" in messages[0]
        assert "why 8 workers collapsed" in messages[0], messages[0]
    else:
        assert not messages, messages


# A Dense layer trained by model.fit on 10 fixed batches: 6 in a first job, which checkpoints
# (tf.train.Checkpoint, or Keras' own .weights.h5 where its optimizers have save_own_variables),
# and 4 in a second job that restores the checkpoint (or, "fresh", the model alone) before its
# first step; and without hora, 6 and 10 batches of the plain Keras optimizer as the reference.
CHECKPOINT = textwrap.dedent("""
    import json, sys, numpy as np, tensorflow as tf
    import hora.tensorflow.keras as hvd
    out, phase, kind, form = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    tf.config.threading.set_intra_op_parallelism_threads(1)
    optimizers = tf.keras.optimizers.legacy if "legacy" in kind else tf.keras.optimizers
    make = {"sgd": lambda: optimizers.SGD(0.05, momentum=0.9),
            "adam": lambda: optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
            "rmsprop": lambda: optimizers.RMSprop(0.01, rho=0.9, momentum=0.5, epsilon=1e-3, centered=True),
            "adamax": lambda: optimizers.Adamax(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
            "adadelta": lambda: optimizers.Adadelta(1.0, rho=0.9, epsilon=1e-3),
            "nadam": lambda: optimizers.Nadam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-3),
            }[kind.split()[-1]]
    init = np.random.default_rng(0)
    w, b = init.standard_normal((40, 30)).astype(np.float32), init.standard_normal(30).astype(np.float32)
    data = np.random.default_rng(7)
    x, y = data.standard_normal((80, 40)).astype(np.float32), data.standard_normal((80, 30)).astype(np.float32)

    def model_with(optimizer):
        model = tf.keras.Sequential([tf.keras.Input((40,)), tf.keras.layers.Dense(30)])
        model.layers[0].set_weights([w, b])
        model.compile(optimizer=optimizer, loss="mse")
        return model

    def slots(optimizer):  # the optimizer's variables but the step count and learning rate, in its order
        variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
        arrays = [np.asarray(v.numpy()) for v in variables]
        return [a.ravel().tolist() for a in arrays if a.dtype == np.float32 and a.ndim]

    def weights(model):
        return [a.ravel().tolist() for a in model.get_weights()]

    if phase == "reference":
        six, ten = model_with(make()), model_with(make())
        six.fit(x[:48], y[:48], batch_size=8, shuffle=False, verbose=0)
        ten.fit(x, y, batch_size=8, shuffle=False, verbose=0)
        json.dump({"slots": slots(six.optimizer), "weights": weights(ten)}, open(f"{out}/reference.json", "w"))
        sys.exit()
    hvd.init()
    opt = hvd.DistributedOptimizer(make(), mode="ps-async")
    model = model_with(opt)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=opt)
    path = f"{out}/saved.weights.h5" if form == "keras" else f"{out}/ckpt"
    if phase == "first":
        model.fit(x[:48], y[:48], batch_size=8, shuffle=False, verbose=0)
        if form == "keras":
            model.save_weights(path)
        else:
            checkpoint.write(path)
        json.dump({"slots": slots(opt), "weights": [a.tolist() for a in model.get_weights()]},
                  open(f"{out}/first.json", "w"))
        sys.exit()
    if phase == "resumed":  # the optimizer's slots must exist for its state to load into them
        if hasattr(opt, "_create_all_weights"):
            opt._create_all_weights(model.trainable_variables)
        else:
            opt.build(model.trainable_variables)
        if form == "keras":
            model.load_weights(path)
        else:
            checkpoint.read(path).assert_existing_objects_matched()
    else:  # fresh: the weights alone (a Keras model's checkpoint holds its optimizer)
        model.set_weights([np.array(a, np.float32) for a in json.load(open(f"{out}/first.json"))["weights"]])
    model.fit(x[48:], y[48:], batch_size=8, shuffle=False, verbose=0)
    json.dump({"weights": weights(model), "iterations": int(opt.iterations.numpy())}, open(f"{out}/{phase}.json", "w"))
""")


@pytest.mark.parametrize("kind,form", [("adam", "tf"), ("rmsprop", "tf"), ("sgd", "keras"), ("legacy adam", "tf"),
                                       ("adamax", "keras"), ("legacy adadelta", "tf"), ("nadam", "tf")])
@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p))))
def test_keras_ps_async_checkpoint_holds_the_servers_optimizer_state(tmp_path, python, kind, form):
    """One worker (the servers apply its pushes in order), two servers: the checkpoint's slots
    equal the plain Keras optimizer's after the same 6 batches (pulled from the servers when it
    was saved), and a job that restores it goes on as if never stopped, where one that restores
    the weights alone does not."""
    if "legacy" in kind and python != sys.executable:
        pytest.skip("Keras 3 has no legacy optimizers")
    if "nadam" in kind and python == sys.executable:
        pytest.skip("the servers run Keras 3's Nadam only")
    script = tmp_path / "checkpoint.py"
    script.write_text(CHECKPOINT)
    subprocess.run([python, str(script), str(tmp_path), "reference", kind, form], check=True, timeout=300)
    for phase in ("first", "resumed", "fresh"):
        out = keras_job(python, 1, 2, script, tmp_path, phase, kind, form)
        assert out.returncode == 0, phase + "\n" + out.stdout + out.stderr
    reference = json.loads((tmp_path / "reference.json").read_text())
    first = json.loads((tmp_path / "first.json").read_text())
    assert len(first["slots"]) == len(reference["slots"]) > 0
    for got, want in zip(first["slots"], reference["slots"]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["iterations"] == 10
    for got, want in zip(resumed["weights"], reference["weights"]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    fresh = json.loads((tmp_path / "fresh.json").read_text())
    assert max(np.abs(np.subtract(g, w)).max() for g, w in zip(fresh["weights"], reference["weights"])) > 1e-3
