#include "engine/autotune/bayesian_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <optional>

#include "hora/errors.h"

namespace hora::engine {

namespace {

// Exploration margin of EI, in units of the scores' spread.
constexpr double kXi = 0.01;
// Candidates scored at random, and how many of the best are refined by pattern search.
constexpr int kCandidates = 2000;
constexpr int kRefined = 5;

double normalPdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi); }
double normalCdf(double z) { return 0.5 * std::erfc(-z / std::numbers::sqrt2); }

}  // namespace

BayesianOptimizer::BayesianOptimizer(int dims, double noise, uint64_t seed, size_t random_start)
    : dims_(dims), noise_(noise), rng_(seed), random_start_(std::max<size_t>(random_start, 1)) {
  if (dims < 1) throw InvalidArgumentError("BayesianOptimizer: needs at least one dimension");
  if (!(noise >= 0)) throw InvalidArgumentError("BayesianOptimizer: the noise must be >= 0");
}

void BayesianOptimizer::add(std::vector<double> x, double score) {
  if (static_cast<int>(x.size()) != dims_)
    throw InvalidArgumentError("BayesianOptimizer: a point of " + std::to_string(x.size()) + " coordinates for " +
                               std::to_string(dims_) + " dimensions");
  for (double& v : x) v = std::clamp(v, 0.0, 1.0);
  x_.push_back(std::move(x));
  y_.push_back(score);
}

std::vector<double> BayesianOptimizer::randomPoint() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p(static_cast<size_t>(dims_));
  for (double& v : p) v = u(rng_);
  return p;
}

GaussianProcess BayesianOptimizer::model() const {
  const double n = static_cast<double>(y_.size());
  const double mean = std::accumulate(y_.begin(), y_.end(), 0.0) / n;
  double var = 0;
  for (double y : y_) var += (y - mean) * (y - mean);
  const double spread = std::sqrt(var / n);
  std::vector<double> z(y_.size());
  for (size_t i = 0; i < y_.size(); ++i) z[i] = spread > 0 ? (y_[i] - mean) / spread : 0.0;
  // A noise of 0 would make the factorisation fragile with near-duplicate points.
  const double noise = std::max(noise_, 1e-3);
  // Kernel by maximum marginal likelihood over a grid: a few lengths (relative to the box) and
  // signal levels; cheap at the autotuner's sizes and free of a local optimiser's failures.
  std::optional<GaussianProcess> best;
  double best_lml = -INFINITY;
  for (double length : {0.1, 0.2, 0.3, 0.5, 0.8}) {
    for (double signal : {0.5, 1.0, 2.0}) {
      GaussianProcess gp(x_, z, RbfKernel{length, signal}, noise);
      const double lml = gp.logMarginalLikelihood();
      if (!best || lml > best_lml) {
        best_lml = lml;
        best.emplace(std::move(gp));
      }
    }
  }
  return std::move(*best);
}

double BayesianOptimizer::expectedImprovement(const GaussianProcess& gp, const std::vector<double>& x,
                                              double best) const {
  const auto p = gp.predict(x);
  const double sigma = std::sqrt(p.variance);
  const double gain = p.mean - best - kXi;
  if (sigma < 1e-12) return std::max(gain, 0.0);
  const double z = gain / sigma;
  return gain * normalCdf(z) + sigma * normalPdf(z);
}

std::vector<double> BayesianOptimizer::next() {
  if (x_.size() < random_start_) return randomPoint();
  const GaussianProcess gp = model();
  double best = -INFINITY;
  for (const auto& x : x_) best = std::max(best, gp.predict(x).mean);
  struct Scored {
    double ei;
    std::vector<double> x;
  };
  std::vector<Scored> candidates;
  candidates.reserve(2 * kCandidates);
  for (int i = 0; i < kCandidates; ++i) {
    auto x = randomPoint();
    candidates.push_back({expectedImprovement(gp, x, best), std::move(x)});
  }
  // Uniform candidates rarely fall close to the incumbent in several dimensions, where the
  // improvement is often found: as many again scattered around the sample the model rates best.
  const auto& incumbent = x_[static_cast<size_t>(bestSample(gp))];
  std::normal_distribution<double> jitter(0.0, 0.05);
  for (int i = 0; i < kCandidates; ++i) {
    auto x = incumbent;
    for (double& v : x) v = std::clamp(v + jitter(rng_), 0.0, 1.0);
    candidates.push_back({expectedImprovement(gp, x, best), std::move(x)});
  }
  std::partial_sort(candidates.begin(), candidates.begin() + kRefined, candidates.end(),
                    [](const Scored& a, const Scored& b) { return a.ei > b.ei; });
  // Pattern search: try a step up and down along each axis, keep what improves, halve the step
  // when nothing does.
  Scored top = candidates.front();
  for (int c = 0; c < kRefined; ++c) {
    Scored s = candidates[static_cast<size_t>(c)];
    for (double step = 0.1; step > 1e-3; step /= 2) {
      bool moved = true;
      while (moved) {
        moved = false;
        for (int d = 0; d < dims_; ++d) {
          for (double sign : {1.0, -1.0}) {
            auto x = s.x;
            x[static_cast<size_t>(d)] = std::clamp(x[static_cast<size_t>(d)] + sign * step, 0.0, 1.0);
            const double ei = expectedImprovement(gp, x, best);
            if (ei > s.ei + 1e-15) {
              s = {ei, std::move(x)};
              moved = true;
            }
          }
        }
      }
    }
    if (s.ei > top.ei) top = std::move(s);
  }
  return top.x;
}

int BayesianOptimizer::bestSample() const {
  if (x_.empty()) return -1;
  return bestSample(model());
}

int BayesianOptimizer::bestSample(const GaussianProcess& gp) const {
  int best = 0;
  double best_mean = -INFINITY;
  for (size_t i = 0; i < x_.size(); ++i) {
    const double m = gp.predict(x_[i]).mean;
    if (m > best_mean) {
      best_mean = m;
      best = static_cast<int>(i);
    }
  }
  return best;
}

}  // namespace hora::engine
