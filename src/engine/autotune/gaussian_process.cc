#include "engine/autotune/gaussian_process.h"

#include <cmath>
#include <numbers>

#include "hora/errors.h"

namespace hora::engine {

GaussianProcess::GaussianProcess(std::vector<std::vector<double>> x, std::vector<double> y, RbfKernel rbf,
                                 double noise)
    : x_(std::move(x)), y_(std::move(y)), kernel_(rbf), n_(x_.size()) {
  if (y_.size() != n_) throw InvalidArgumentError("GaussianProcess: " + std::to_string(n_) + " points but " +
                                                  std::to_string(y_.size()) + " values");
  for (const auto& p : x_)
    if (p.size() != x_.front().size()) throw InvalidArgumentError("GaussianProcess: points differ in dimension");
  // K, then its Cholesky factor in place (Cholesky-Banachiewicz, row by row).
  l_.assign(n_ * n_, 0.0);
  for (size_t i = 0; i < n_; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double s = kernel(x_[i], x_[j]) + (i == j ? noise * noise : 0.0);
      for (size_t k = 0; k < j; ++k) s -= l_[i * n_ + k] * l_[j * n_ + k];
      if (i == j) {
        // A tiny jitter keeps noise = 0 with distinct points factorable despite rounding.
        s += 1e-10 * kernel_.signal * kernel_.signal;
        if (!(s > 0)) throw InternalError("GaussianProcess: the kernel matrix is not positive definite");
        l_[i * n_ + i] = std::sqrt(s);
      } else {
        l_[i * n_ + j] = s / l_[j * n_ + j];
      }
    }
  }
  // alpha = L^-T L^-1 y
  alpha_ = y_;
  solveLower(alpha_);
  for (size_t i = n_; i-- > 0;) {
    double s = alpha_[i];
    for (size_t k = i + 1; k < n_; ++k) s -= l_[k * n_ + i] * alpha_[k];
    alpha_[i] = s / l_[i * n_ + i];
  }
}

double GaussianProcess::kernel(std::span<const double> a, std::span<const double> b) const {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  return kernel_.signal * kernel_.signal * std::exp(-d2 / (2 * kernel_.length * kernel_.length));
}

void GaussianProcess::solveLower(std::vector<double>& b) const {
  for (size_t i = 0; i < n_; ++i) {
    double s = b[i];
    for (size_t k = 0; k < i; ++k) s -= l_[i * n_ + k] * b[k];
    b[i] = s / l_[i * n_ + i];
  }
}

GaussianProcess::Prediction GaussianProcess::predict(std::span<const double> x) const {
  std::vector<double> ks(n_);
  Prediction p;
  for (size_t i = 0; i < n_; ++i) {
    ks[i] = kernel(x, x_[i]);
    p.mean += ks[i] * alpha_[i];
  }
  solveLower(ks);  // v = L^-1 k(X, x); k(x, X) K^-1 k(X, x) = |v|^2
  double vv = 0;
  for (double v : ks) vv += v * v;
  p.variance = std::max(0.0, kernel(x, x) - vv);
  return p;
}

double GaussianProcess::logMarginalLikelihood() const {
  // -1/2 y^T K^-1 y - 1/2 log|K| - n/2 log 2 pi, with log|K| = 2 sum log L_ii
  double fit = 0, logdet = 0;
  for (size_t i = 0; i < n_; ++i) {
    fit += y_[i] * alpha_[i];
    logdet += std::log(l_[i * n_ + i]);
  }
  return -0.5 * fit - logdet - 0.5 * static_cast<double>(n_) * std::log(2 * std::numbers::pi);
}

}  // namespace hora::engine
