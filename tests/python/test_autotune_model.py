"""The autotuner's Gaussian process (src/engine/autotune/gaussian_process.h) against a numpy reference
written from the textbook formulas (Rasmussen & Williams, algorithm 2.1, with numpy's own
solve instead of a Cholesky factorisation)."""

import importlib.util
import os
import glob

import numpy
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_binding():
    """The test-only extension tests/python/bindings/autotune_model.cc, built with the tests into
    <build>/tests/python (HORA_BUILD_DIR, default build/release, as scripts/setup.sh builds)."""
    build = os.environ.get("HORA_BUILD_DIR", "build/release")
    found = glob.glob(os.path.join(ROOT, build, "tests", "python", "_autotune_model*.so"))
    assert found, f"_autotune_model is not built under {build}/tests/python (scripts/setup.sh builds it)"
    spec = importlib.util.spec_from_file_location("_autotune_model", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gp = load_binding()


def reference(x, y, xs, length, signal, noise):
    x, y, xs = numpy.asarray(x), numpy.asarray(y), numpy.asarray(xs)

    def k(a, b):
        d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return signal**2 * numpy.exp(-d2 / (2 * length**2))

    K = k(x, x) + noise**2 * numpy.eye(len(x))
    Ks = k(x, xs)
    mean = Ks.T @ numpy.linalg.solve(K, y)
    var = signal**2 - numpy.einsum("ij,ij->j", Ks, numpy.linalg.solve(K, Ks))
    sign, logdet = numpy.linalg.slogdet(K)
    lml = -0.5 * y @ numpy.linalg.solve(K, y) - 0.5 * logdet - 0.5 * len(x) * numpy.log(2 * numpy.pi)
    return mean, var, lml


@pytest.mark.parametrize("dims,n,length,signal,noise", [
    (1, 5, 0.3, 1.0, 0.1),
    (2, 12, 0.2, 2.0, 0.8),
    (5, 30, 0.5, 0.5, 0.05),
    (3, 20, 0.1, 1.0, 0.3),
])
def test_posterior_mean_variance_and_likelihood_equal_numpy(dims, n, length, signal, noise):
    rng = numpy.random.default_rng(dims * 100 + n)
    x = rng.uniform(size=(n, dims))
    y = numpy.sin(3 * x).sum(1) + rng.normal(scale=0.1, size=n)
    xs = numpy.vstack([rng.uniform(size=(40, dims)), x[:3]])  # new points and training points
    mean, var, lml = gp.predict(x.tolist(), y.tolist(), xs.tolist(), length, signal, noise)
    want_mean, want_var, want_lml = reference(x, y, xs, length, signal, noise)
    numpy.testing.assert_allclose(mean, want_mean, rtol=1e-7, atol=1e-8)
    numpy.testing.assert_allclose(var, want_var, rtol=1e-6, atol=1e-8)
    assert lml == pytest.approx(want_lml, rel=1e-8)


def test_with_little_noise_the_mean_passes_through_the_samples():
    x = [[0.1], [0.5], [0.9]]
    y = [1.0, -2.0, 3.0]
    mean, var, _ = gp.predict(x, y, x, 0.2, 1.0, 1e-4)
    numpy.testing.assert_allclose(mean, y, atol=1e-3)
    assert max(var) < 1e-6


def test_mismatched_sizes_are_refused():
    with pytest.raises(ValueError, match="3 points but 2 values"):
        gp.predict([[0.0], [0.5], [1.0]], [1.0, 2.0], [[0.2]], 0.3, 1.0, 0.1)
