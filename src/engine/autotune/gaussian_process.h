// GaussianProcess: Gaussian-process regression with a squared-exponential (RBF) kernel, the
// surrogate model of the autotuner's Bayesian optimisation (bayesian_optimizer.h).
//
//   k(a, b) = signal^2 * exp(-|a - b|^2 / (2 length^2)),   K = k(X, X) + noise^2 I
//   mean(x) = k(x, X) K^-1 y,   variance(x) = k(x, x) - k(x, X) K^-1 k(X, x)
//
// K^-1 is never formed: fit() factors K = L L^T (Cholesky) once and every prediction is two
// triangular solves. The variance is the latent function's (without the noise term), which is
// what expected improvement needs. Plain value type, no threads; sizes are the autotuner's
// (tens of samples, a handful of dimensions), so O(n^3) fitting is nothing.
#pragma once

#include <span>
#include <vector>

namespace hora::engine {

struct RbfKernel {
  double length = 0.3;  // in the units of x (the autotuner's unit box)
  double signal = 1.0;  // standard deviation of the function around its mean
};

class GaussianProcess {
 public:
  // x: n points of equal dimension; y: n values; noise: the standard deviation of the
  // observation noise. InvalidArgumentError on a size mismatch, InternalError if K is not
  // positive definite (cannot happen for noise > 0 or distinct points).
  GaussianProcess(std::vector<std::vector<double>> x, std::vector<double> y, RbfKernel kernel, double noise);

  struct Prediction {
    double mean = 0;
    double variance = 0;
  };
  Prediction predict(std::span<const double> x) const;

  // log p(y | X): how well the kernel explains the data (to choose the kernel's parameters).
  double logMarginalLikelihood() const;

  double kernel(std::span<const double> a, std::span<const double> b) const;

 private:
  // Solves L z = b in place (forward substitution).
  void solveLower(std::vector<double>& b) const;

  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
  RbfKernel kernel_;
  size_t n_;
  std::vector<double> l_;      // the Cholesky factor of K, row-major n x n, lower triangle
  std::vector<double> alpha_;  // K^-1 y
};

}  // namespace hora::engine
