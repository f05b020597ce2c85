// BayesianOptimizer: maximises an expensive, noisy function on the unit box [0, 1]^d, one
// sample at a time (the autotuner's search, Note [autotuning] in parameter_manager.h).
//
// Each call of next() fits a Gaussian process (gaussian_process.h) to the samples so far, with
// the scores standardised (mean 0, spread 1) so that one noise level and one kernel grid fit
// any unit of score, and the kernel's length and signal chosen from a small grid by the
// marginal likelihood. It then proposes the point of highest expected improvement
//   EI(x) = (mu - best - xi) Phi(z) + sigma phi(z),  z = (mu - best - xi) / sigma
// over the best posterior mean among the samples, maximised over random candidates (uniform, and
// as many scattered around the best sample) followed by a pattern search around the best few. best() is the sampled point whose posterior mean is
// highest: the noise-aware answer (the highest single score is often a lucky one).
//
// Deterministic for a given seed and sample sequence. Single-threaded.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/autotune/gaussian_process.h"

namespace hora::engine {

class BayesianOptimizer {
 public:
  // noise: the standard deviation of a score's noise in units of the scores' spread.
  // random_start: next() returns uniformly random points until there are this many samples
  // (a model of one or two points says little).
  BayesianOptimizer(int dims, double noise, uint64_t seed = 1, size_t random_start = 1);

  int dims() const { return dims_; }
  // x in [0, 1]^dims (clamped).
  void add(std::vector<double> x, double score);
  size_t samples() const { return x_.size(); }

  // The next point to sample (uniformly random ones first, see random_start).
  std::vector<double> next();
  // The index of the sample whose posterior mean is highest; -1 without samples.
  int bestSample() const;
  const std::vector<double>& sample(size_t i) const { return x_[i]; }
  double score(size_t i) const { return y_[i]; }

  // The model of the samples so far (standardised scores), exposed for tests.
  GaussianProcess model() const;
  double expectedImprovement(const GaussianProcess& gp, const std::vector<double>& x, double best) const;

 private:
  std::vector<double> randomPoint();
  int bestSample(const GaussianProcess& gp) const;

  int dims_;
  double noise_;
  std::mt19937_64 rng_;
  size_t random_start_;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
};

}  // namespace hora::engine
