// A test-only extension, kept out of hora._core: the autotuner's Gaussian process
// (src/engine/autotune/gaussian_process.h) for tests/python/test_autotune_model.py, which checks it against
// numpy. Built with the tests into <build>/tests/python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "engine/autotune/gaussian_process.h"
#include "hora/errors.h"

namespace py = pybind11;

// predict(x, y, xs, length, signal, noise) -> (means, variances, log marginal likelihood) at xs.
PYBIND11_MODULE(_autotune_model, m) {
  // As hora._core does: a refused argument is Python's ValueError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hora::InvalidArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("predict",
        [](std::vector<std::vector<double>> x, std::vector<double> y, const std::vector<std::vector<double>>& xs,
           double length, double signal, double noise) {
          hora::engine::GaussianProcess gp(std::move(x), std::move(y), {length, signal}, noise);
          std::vector<double> means, variances;
          for (const auto& p : xs) {
            const auto pred = gp.predict(p);
            means.push_back(pred.mean);
            variances.push_back(pred.variance);
          }
          return py::make_tuple(means, variances, gp.logMarginalLikelihood());
        },
        py::arg("x"), py::arg("y"), py::arg("xs"), py::arg("length"), py::arg("signal"), py::arg("noise"));
}
