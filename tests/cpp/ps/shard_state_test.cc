// A parameter server's shard state (src/ps/shard_state.h), its workers played by threads: ps-sync
// rounds, every server optimizer of ps-async against a replay in double, bounded staleness, a
// server restarted from saved optimizer state, and the failures of a round.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hora/errors.h"
#include "hora/ps.h"
#include "ps/shard_state.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

ps::Registration registration(ps::Mode mode, uint32_t workers, size_t elements, int64_t staleness = -1) {
  ps::Registration r;
  r.mode = mode;
  r.workers = workers;
  r.max_staleness = staleness;
  r.lr = 0.5;
  r.momentum = 0.9;
  r.average = 1;
  r.shard_elements = elements;
  r.layout_hash = 42;
  return r;
}

TEST(PsShardState, SyncRoundsAverageEveryWorker) {
  constexpr int kWorkers = 3, kSteps = 4;
  constexpr size_t kN = 5;
  ps::ShardState state("parameter server 0", kWorkers);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      try {
        const auto d = common::Deadline::after(10s);
        state.registerWorker(w, registration(ps::Mode::kSync, kWorkers, kN), {}, d);
        for (int s = 1; s <= kSteps; ++s) {
          std::vector<float> g(kN);
          for (size_t i = 0; i < kN; ++i) g[i] = static_cast<float>((w + 1) * 10 + s * 100 + static_cast<int>(i));
          const auto reply = state.push(w, static_cast<uint64_t>(s), g.data(), {}, d);
          for (size_t i = 0; i < kN; ++i) {
            // mean over w of (w+1)*10 + 100 s + i = 20 + 100 s + i
            const float expected = static_cast<float>(20 + 100 * s + static_cast<int>(i));
            if (reply.values[i] != expected) throw std::runtime_error("wrong mean at step " + std::to_string(s));
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(errors[static_cast<size_t>(w)], "") << "worker " << w;
}

// Each push is applied with its own learning rate and momentum (a schedule's, here lr 0.5 / step
// and the momentum lowered after step 10), in the order the pushes arrived.
TEST(PsShardState, AsyncAppliesSgdWithMomentumInArrivalOrder) {
  constexpr int kWorkers = 2, kSteps = 20;
  const std::vector<float> initial = {1.0f, -2.0f, 0.5f};
  ps::ShardState state("parameter server 0", kWorkers);
  struct Applied {
    uint64_t version;
    int worker;
    int step;
    std::vector<float> after;
  };
  std::mutex mutex;
  std::vector<Applied> log;
  const auto gradient = [](int w, int s) {
    return std::vector<float>{0.25f * static_cast<float>(w + 1), -0.125f * static_cast<float>(s), 1.0f / static_cast<float>(s + w)};
  };
  const auto sgd = [](int s) { return ps::SgdStep{0.5f / static_cast<float>(s), s <= 10 ? 0.9f : 0.5f}; };
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const auto d = common::Deadline::after(10s);
      state.registerWorker(w, registration(ps::Mode::kAsync, kWorkers, 3), initial, d);
      for (int s = 1; s <= kSteps; ++s) {
        const auto g = gradient(w, s);
        const auto reply = state.push(w, static_cast<uint64_t>(s), g.data(), sgd(s), d);
        std::lock_guard lock(mutex);
        log.push_back({reply.version, w, s, std::vector<float>(reply.values.begin(), reply.values.end())});
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(log.size(), static_cast<size_t>(kWorkers * kSteps));
  std::sort(log.begin(), log.end(), [](const Applied& a, const Applied& b) { return a.version < b.version; });
  // Replay in double, in the server's order: v = m v + g, p -= lr v.
  std::vector<double> p(initial.begin(), initial.end()), v(3, 0.0);
  for (size_t k = 0; k < log.size(); ++k) {
    ASSERT_EQ(log[k].version, k + 1);
    const auto g = gradient(log[k].worker, log[k].step);
    const double lr = 0.5 / log[k].step, m = log[k].step <= 10 ? 0.9 : 0.5;
    for (size_t i = 0; i < 3; ++i) {
      v[i] = m * v[i] + g[i];
      p[i] -= lr * v[i];
      EXPECT_NEAR(log[k].after[i], p[i], 1e-4 * (1 + std::abs(p[i]))) << "push " << k + 1 << " element " << i;
    }
  }
  const auto final_params = state.parameters();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(final_params[i], p[i], 1e-4 * (1 + std::abs(p[i])));
}

// Keras' form (keras_form): v = m v - lr g; p += v, which differs from torch's once lr changes.
TEST(PsShardState, AsyncAppliesKerasSgdWhenRegisteredSo) {
  ps::ShardState state("parameter server 0", 1);
  const auto d = common::Deadline::after(10s);
  ps::Registration r = registration(ps::Mode::kAsync, 1, 2);
  r.keras_form = 1;
  state.registerWorker(0, r, {1.0f, -1.0f}, d);
  double p[2] = {1.0, -1.0}, v[2] = {0.0, 0.0};
  for (int s = 1; s <= 6; ++s) {
    const float g[2] = {0.5f * static_cast<float>(s), -0.25f};
    const float lr = 0.1f / static_cast<float>(s), m = 0.9f;
    const auto reply = state.push(0, static_cast<uint64_t>(s), g, {lr, m}, d);
    for (size_t i = 0; i < 2; ++i) {
      v[i] = m * v[i] - static_cast<double>(lr) * g[i];
      p[i] += v[i];
      EXPECT_NEAR(reply.values[i], p[i], 1e-5) << "step " << s << " element " << i;
    }
  }
}

// Every optimizer: one worker's pushes of steps 1..8 (lr 0.1 / s, momentum 0.9 and 0.5 after
// step 4, as a schedule would) through a ShardState registered with `r`, each reply against
// `replay` of the same push in double (t: the server's count of applied pushes). Epsilon is large
// (0.05) so that where it goes, inside the root or beside it, shows in the parameters.
// Note [element types]: the shard holds the 3 elements twice, as float64 (the first 3) and as
// float32, pushed the same gradients (float32 values, exact in both). The float32 ones follow the
// replay to float32's precision; the float64 ones to float64's, which a server computing them in
// float32 (or rounding its lr, its coefficients or its state to float32) misses by about 1e-7.
using Replay = std::function<void(std::vector<double>& p, const float* g, double lr, double m, int t)>;

void expectTheServerFollows(ps::Registration r, const Replay& replay) {
  r.shard_elements = 6;
  r.wide_elements = 3;
  ps::ShardState state("parameter server 0", 1);
  const auto d = common::Deadline::after(10s);
  const std::vector<float> initial = {1.0f, -2.0f, 0.5f};
  state.registerWorker(0, r, initial, d, std::vector<double>(initial.begin(), initial.end()));
  std::vector<double> p(initial.begin(), initial.end());
  for (int s = 1; s <= 8; ++s) {
    const float g[3] = {0.5f * static_cast<float>(s), -0.25f, 1.0f / static_cast<float>(s) - 0.3f};
    const double wide_g[3] = {g[0], g[1], g[2]};
    const float lr = 0.1f / static_cast<float>(s), m = s <= 4 ? 0.9f : 0.5f;
    const auto reply = state.push(0, static_cast<uint64_t>(s), g, {lr, m}, d, wide_g);
    replay(p, g, lr, m, s);
    ASSERT_EQ(reply.values.size(), 3u);
    ASSERT_EQ(reply.wide.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(reply.values[i], p[i], 1e-5 * (1 + std::abs(p[i]))) << "step " << s << " element " << i;
      EXPECT_NEAR(reply.wide[i], p[i], 1e-13 * (1 + std::abs(p[i]))) << "float64, step " << s << " element " << i;
    }
  }
}

// torch.optim.SGD (v = m v + g; p -= lr v) and Keras' SGD (v = m v - lr g; p += v), which differ
// as the lr changes.
TEST(PsShardState, AsyncAppliesSgdInEitherFormInBothElementTypes) {
  for (const bool keras : {false, true}) {
    ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
    r.keras_form = keras ? 1 : 0;
    std::vector<double> v(3, 0.0);
    expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double m, int) {
      for (size_t i = 0; i < 3; ++i) {
        v[i] = keras ? m * v[i] - lr * g[i] : m * v[i] + g[i];
        p[i] += keras ? v[i] : -lr * v[i];
      }
    });
  }
}

// torch.optim.Adam (epsilon beside the corrected root) and Keras' Adam (epsilon beside the
// uncorrected root, the correction in the step size), betas 0.8 and 0.9, epsilon 0.05.
TEST(PsShardState, AsyncAppliesAdamInEitherFormInBothElementTypes) {
  for (const bool keras : {false, true}) {
    ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
    r.optimizer = ps::Optimizer::kAdam;
    r.keras_form = keras ? 1 : 0;
    r.beta1 = 0.8;
    r.beta2 = 0.9;
    r.epsilon = 0.05;
    std::vector<double> m1(3, 0.0), m2(3, 0.0);
    expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int t) {
      const double c1 = 1 - std::pow(0.8, t), c2 = 1 - std::pow(0.9, t);
      for (size_t i = 0; i < 3; ++i) {
        m1[i] = 0.8 * m1[i] + 0.2 * g[i];
        m2[i] = 0.9 * m2[i] + 0.1 * double(g[i]) * g[i];
        p[i] -= keras ? lr * std::sqrt(c2) / c1 * m1[i] / (std::sqrt(m2[i]) + 0.05)
                      : lr * (m1[i] / c1) / (std::sqrt(m2[i] / c2) + 0.05);
      }
    });
  }
}

// An update of 1e-10 to a parameter of 1.0 is below float32's resolution there (2^-24 ~ 6e-8):
// the float32 element stays 1.0, the float64 one takes every update, as numpy in float64 does.
TEST(PsShardState, Float64ElementsKeepUpdatesThatFloat32Loses) {
  for (const ps::Optimizer optimizer : {ps::Optimizer::kSgd, ps::Optimizer::kAdam}) {
    ps::Registration r = registration(ps::Mode::kAsync, 1, 2);
    r.optimizer = optimizer;
    r.wide_elements = 1;
    ps::ShardState state("parameter server 0", 1);
    const auto d = common::Deadline::after(10s);
    state.registerWorker(0, r, {1.0f}, d, {1.0});
    double p = 1.0, v = 0.0, m1 = 0.0, m2 = 0.0;
    for (int s = 1; s <= 5; ++s) {
      const float g = 1.0f;
      const double wide_g = 1.0;
      const auto reply = state.push(0, static_cast<uint64_t>(s), &g, {1e-10, 0.0}, d, &wide_g);
      if (optimizer == ps::Optimizer::kSgd) {
        v = 0.0 * v + 1.0;
        p -= 1e-10 * v;
      } else {
        m1 = 0.9 * m1 + 0.1;
        m2 = 0.999 * m2 + 0.001;
        p -= 1e-10 * (m1 / (1 - std::pow(0.9, s))) / (std::sqrt(m2 / (1 - std::pow(0.999, s))) + 1e-8);
      }
      EXPECT_EQ(reply.values[0], 1.0f) << ps::toString(optimizer) << " step " << s;
      EXPECT_NEAR(reply.wide[0], p, 1e-15) << ps::toString(optimizer) << " step " << s;
    }
    EXPECT_LT(state.wideParameters()[0], 1.0 - 4.9e-10) << ps::toString(optimizer);
  }
}

// ps-sync sums and averages float64 elements in float64: 1, 1 + 1e-12 and 1 + 2e-12 average to
// 1 + 1e-12, which float32 would round to 1.
TEST(PsShardState, SyncAveragesFloat64ElementsInFloat64) {
  constexpr int kWorkers = 3;
  ps::ShardState state("parameter server 0", kWorkers);
  ps::Registration r = registration(ps::Mode::kSync, kWorkers, 3);
  r.wide_elements = 2;
  std::vector<std::thread> threads;
  std::vector<std::vector<double>> wide(kWorkers);
  std::vector<float> narrow(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const auto d = common::Deadline::after(10s);
      state.registerWorker(w, r, {}, d);
      const double g[2] = {1.0 + 1e-12 * w, -3.0 * w};
      const float f = static_cast<float>(w);
      const auto reply = state.push(w, 1, &f, {}, d, g);
      wide[static_cast<size_t>(w)].assign(reply.wide.begin(), reply.wide.end());
      narrow[static_cast<size_t>(w)] = reply.values[0];
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(wide[static_cast<size_t>(w)].size(), 2u);
    EXPECT_NEAR(wide[static_cast<size_t>(w)][0], 1.0 + 1e-12, 1e-15) << "worker " << w;
    EXPECT_DOUBLE_EQ(wide[static_cast<size_t>(w)][1], -3.0);
    EXPECT_EQ(narrow[static_cast<size_t>(w)], 1.0f);
  }
}

// Note [optimizer state] with both element types: the float64 slots travel in float64, so a
// server started from them goes on exactly as the first (and they hold values float32 cannot).
TEST(PsShardState, Float64OptimizerStateRestartsAServerExactly) {
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kAdam;
  r.wide_elements = 2;
  const auto d = common::Deadline::after(10s);
  const auto push = [&](ps::ShardState& state, int s, int as) {
    const float g = 0.1f * static_cast<float>(s);
    const double wide_g[2] = {1.0 / 3.0 / s, -1e-9 * s};
    return state.push(0, static_cast<uint64_t>(as), &g, {0.01, 0.0}, d, wide_g);
  };
  ps::ShardState first("parameter server 0", 1);
  first.registerWorker(0, r, {0.5f}, d, {1.0 / 7.0, 2.0});
  for (int s = 1; s <= 4; ++s) push(first, s, s);
  const ps::OptimizerState state = first.optimizerState(0);
  ASSERT_EQ(state.wide_slots.size(), 4u);  // 2 slots of 2 elements
  ASSERT_EQ(state.slots.size(), 2u);
  EXPECT_NE(state.wide_slots[2], static_cast<double>(static_cast<float>(state.wide_slots[2])));
  ps::Registration restart = r;
  restart.slots = 2;
  restart.optimizer_step = state.step;
  std::vector<float> initial = first.parameters();
  initial.insert(initial.end(), state.slots.begin(), state.slots.end());
  std::vector<double> initial_wide = first.wideParameters();
  initial_wide.insert(initial_wide.end(), state.wide_slots.begin(), state.wide_slots.end());
  ps::ShardState second("parameter server 0", 1);
  second.registerWorker(0, restart, initial, d, initial_wide);
  EXPECT_EQ(second.optimizerState(0).wide_slots, state.wide_slots);
  for (int s = 5; s <= 8; ++s) {
    const auto a = push(first, s, s);
    const auto b = push(second, s, s - 4);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(a.wide[i], b.wide[i]) << "push " << s << " element " << i;
    EXPECT_EQ(a.values[0], b.values[0]) << "push " << s;
  }
  // A registration whose float64 values do not match the shard's is refused, naming both counts.
  ps::ShardState third("parameter server 0", 1);
  try {
    third.registerWorker(0, r, {0.5f}, d, {1.0});
    ADD_FAILURE() << "a float64 part of 1 value was taken for 2 elements";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("2 float64 elements"), std::string::npos) << e.what();
  }
}

ps::Registration adagrad(bool keras_form, uint32_t workers = 1) {
  ps::Registration r = registration(ps::Mode::kAsync, workers, 3);
  r.optimizer = ps::Optimizer::kAdagrad;
  r.keras_form = keras_form ? 1 : 0;
  r.epsilon = 0.05;
  r.initial_accumulator = 0.1;
  r.lr_decay = keras_form ? 0.0 : 0.2;  // torch's only
  return r;
}

// torch.optim.Adagrad: s += g^2; p -= lr / (1 + (t - 1) lr_decay) g / (sqrt(s) + eps).
TEST(PsShardState, AsyncAppliesTorchAdagrad) {
  std::vector<double> sum(3, 0.1);
  expectTheServerFollows(adagrad(false), [&](std::vector<double>& p, const float* g, double lr, double, int t) {
    for (size_t i = 0; i < 3; ++i) {
      sum[i] += double(g[i]) * g[i];
      p[i] -= lr / (1 + (t - 1) * 0.2) * g[i] / (std::sqrt(sum[i]) + 0.05);
    }
  });
}

// Keras' Adagrad: s += g^2; p -= lr g / sqrt(s + eps).
TEST(PsShardState, AsyncAppliesKerasAdagrad) {
  std::vector<double> sum(3, 0.1);
  expectTheServerFollows(adagrad(true), [&](std::vector<double>& p, const float* g, double lr, double, int) {
    for (size_t i = 0; i < 3; ++i) {
      sum[i] += double(g[i]) * g[i];
      p[i] -= lr * g[i] / std::sqrt(sum[i] + 0.05);
    }
  });
}

// torch.optim.SGD's weight_decay (0.3), added to the gradient: v = m v + g + wd p; p -= lr v.
TEST(PsShardState, AsyncAddsCoupledWeightDecayToTheGradient) {
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.weight_decay = 0.3;
  std::vector<double> v(3, 0.0);
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double m, int) {
    for (size_t i = 0; i < 3; ++i) {
      v[i] = m * v[i] + g[i] + 0.3 * p[i];
      p[i] -= lr * v[i];
    }
  });
}

// torch.optim.AdamW (weight_decay 0.3): p *= 1 - lr wd, then Adam's step on the gradient alone.
TEST(PsShardState, AsyncDecaysTheParametersBeforeAdamWhenDecoupled) {
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kAdam;
  r.weight_decay = 0.3;
  r.decoupled_weight_decay = 1;
  std::vector<double> m1(3, 0.0), m2(3, 0.0);
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int t) {
    for (size_t i = 0; i < 3; ++i) {
      p[i] *= 1 - lr * 0.3;
      m1[i] = 0.9 * m1[i] + 0.1 * g[i];
      m2[i] = 0.999 * m2[i] + 0.001 * double(g[i]) * g[i];
      const double mhat = m1[i] / (1 - std::pow(0.9, t)), vhat = m2[i] / (1 - std::pow(0.999, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
  });
  ps::Registration coupled = r;
  coupled.decoupled_weight_decay = 0;
  EXPECT_NE(ps::registrationDifference(r, coupled).find("decoupled weight decay"), std::string::npos);
}

struct RmspropCase {
  bool keras_form, centered;
};

class PsRmsprop : public ::testing::TestWithParam<RmspropCase> {};

// RMSprop (rho 0.8), each push at its own lr and momentum: q = rho q + (1 - rho) g^2, centered
// c = rho c + (1 - rho) g and q - c^2 under the root; torch.optim.RMSprop b = m b + g / (sqrt(.) +
// eps), p -= lr b; Keras' b = m b + lr g / sqrt(. + eps), p -= b.
TEST_P(PsRmsprop, AsyncAppliesRmspropInItsForm) {
  const RmspropCase c = GetParam();
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kRmsprop;
  r.keras_form = c.keras_form ? 1 : 0;
  r.centered = c.centered ? 1 : 0;
  r.beta2 = 0.8;
  r.epsilon = 0.05;
  std::vector<double> q(3, 0.0), mean(3, 0.0), b(3, 0.0);
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double m, int) {
    for (size_t i = 0; i < 3; ++i) {
      q[i] = 0.8 * q[i] + 0.2 * g[i] * g[i];
      mean[i] = 0.8 * mean[i] + 0.2 * g[i];
      const double square = c.centered ? q[i] - mean[i] * mean[i] : q[i];
      if (c.keras_form) {
        b[i] = m * b[i] + lr * g[i] / std::sqrt(square + 0.05);
        p[i] -= b[i];
      } else {
        b[i] = m * b[i] + g[i] / (std::sqrt(square) + 0.05);
        p[i] -= lr * b[i];
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Forms, PsRmsprop,
                         ::testing::Values(RmspropCase{false, false}, RmspropCase{false, true},
                                           RmspropCase{true, false}, RmspropCase{true, true}),
                         [](const ::testing::TestParamInfo<RmspropCase>& param) {
                           return std::string(param.param.keras_form ? "Keras" : "Torch") +
                                  (param.param.centered ? "Centered" : "Plain");
                         });

class PsAdamax : public ::testing::TestWithParam<bool> {};

// Adamax (betas 0.9, 0.999 as registered; eps 0.05): m = b1 m + (1 - b1) g; torch.optim.Adamax
// u = max(b2 u, |g| + eps), p -= lr / (1 - b1^t) m / u; Keras' u = max(b2 u, |g|), p -= lr /
// (1 - b1^t) m / (u + eps).
TEST_P(PsAdamax, AsyncAppliesAdamaxInItsForm) {
  const bool keras = GetParam();
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kAdamax;
  r.keras_form = keras ? 1 : 0;
  r.epsilon = 0.05;
  std::vector<double> m(3, 0.0), u(3, 0.0);
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int t) {
    for (size_t i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      u[i] = std::max(0.999 * u[i], std::abs(double(g[i])) + (keras ? 0.0 : 0.05));
      p[i] -= lr / (1 - std::pow(0.9, t)) * m[i] / (u[i] + (keras ? 0.05 : 0.0));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Forms, PsAdamax, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) { return param.param ? "Keras" : "Torch"; });

// torch.optim.Adadelta (rho 0.8, eps 0.05): q = rho q + (1 - rho) g^2; d = sqrt(a + eps) /
// sqrt(q + eps) g; a = rho a + (1 - rho) d^2; p -= lr d.
TEST(PsShardState, AsyncAppliesTorchAdadelta) {
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kAdadelta;
  r.beta2 = 0.8;
  r.epsilon = 0.05;
  std::vector<double> q(3, 0.0), a(3, 0.0);
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int) {
    for (size_t i = 0; i < 3; ++i) {
      q[i] = 0.8 * q[i] + 0.2 * g[i] * g[i];
      const double d = std::sqrt(a[i] + 0.05) / std::sqrt(q[i] + 0.05) * g[i];
      a[i] = 0.8 * a[i] + 0.2 * d * d;
      p[i] -= lr * d;
    }
  });
}

// NAdam (betas 0.9, 0.999 as registered; eps 0.05), the momentum u_t = b1 (1 - 0.96^(t d) / 2)
// and P_t = u_1 ... u_t: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr ((1 - u_t) g /
// (1 - P_t) + u_(t+1) m / (1 - P_(t+1))) / (sqrt(v / (1 - b2^t)) + eps), P_(t+1) = P_t u_(t+1)
// (torch 2 with d = 0.004, Keras with d = 1) or P_t u_t u_(t+1) (torch 1.13).
struct NadamCase {
  const char* name;
  double decay;
  bool twice;
};

class PsNadam : public ::testing::TestWithParam<NadamCase> {};

TEST_P(PsNadam, AsyncAppliesNadamInItsForm) {
  const NadamCase c = GetParam();
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kNadam;
  r.epsilon = 0.05;
  r.lr_decay = c.decay;
  r.nadam_twice = c.twice ? 1 : 0;
  std::vector<double> m(3, 0.0), v(3, 0.0);
  double product = 1;
  const auto momentum = [&](int t) { return 0.9 * (1 - 0.5 * std::pow(0.96, t * c.decay)); };
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int t) {
    product *= momentum(t);
    const double next = product * (c.twice ? momentum(t) : 1.0) * momentum(t + 1);
    for (size_t i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double denominator = std::sqrt(v[i] / (1 - std::pow(0.999, t))) + 0.05;
      p[i] -= lr * ((1 - momentum(t)) * g[i] / (1 - product) + momentum(t + 1) * m[i] / (1 - next)) / denominator;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Forms, PsNadam,
                         ::testing::Values(NadamCase{"Torch", 0.004, false}, NadamCase{"Torch1", 0.004, true},
                                           NadamCase{"Keras", 1.0, false}),
                         [](const ::testing::TestParamInfo<NadamCase>& param) { return param.param.name; });

// torch.optim.RAdam (betas 0.9, 0.999 as registered; eps 0.05): m, v as Adam's; r_inf = 2 / (1 -
// b2) - 1, r_t = r_inf - 2 t b2^t / (1 - b2^t); p -= lr m / (1 - b1^t), times rect sqrt(1 - b2^t)
// / (sqrt(v) + eps) once r_t > 5. With b2 = 0.9 (r_inf 19) the first 5 steps are plain momentum
// and the rest rectified: both branches run.
TEST(PsShardState, AsyncAppliesTorchRadam) {
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kRadam;
  r.beta2 = 0.9;
  r.epsilon = 0.05;
  std::vector<double> m(3, 0.0), v(3, 0.0);
  int rectified = 0;
  expectTheServerFollows(r, [&](std::vector<double>& p, const float* g, double lr, double, int t) {
    const double b2t = std::pow(0.9, t), rho_inf = 2 / (1 - 0.9) - 1;
    const double rho = rho_inf - 2 * t * b2t / (1 - b2t);
    rectified += rho > 5;
    for (size_t i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.9 * v[i] + 0.1 * g[i] * g[i];
      double step = lr * m[i] / (1 - std::pow(0.9, t));
      if (rho > 5)
        step *= std::sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)) *
                std::sqrt(1 - b2t) / (std::sqrt(v[i]) + 0.05);
      p[i] -= step;
    }
  });
  EXPECT_GT(rectified, 0);
  EXPECT_LT(rectified, 8);
}

// A registration names an optimizer this server knows; every worker's Adagrad and RMSprop
// options must agree, the field named.
TEST(PsShardState, AsyncRegistrationsOfTheNewOptimizersMustAgree) {
  ps::ShardState state("parameter server 0", 2);
  const auto d = common::Deadline::after(10s);
  ps::Registration unknown = adagrad(false, 2);
  unknown.optimizer = static_cast<ps::Optimizer>(9);
  EXPECT_THROW(state.registerWorker(0, unknown, {0, 0, 0}, d), InvalidArgumentError);
  state.registerWorker(0, adagrad(false, 2), {0, 0, 0}, d);
  ps::Registration other = adagrad(false, 2);
  other.lr_decay = 0.5;
  try {
    state.registerWorker(1, other, {0, 0, 0}, d);
    ADD_FAILURE() << "a differing lr_decay was accepted";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("lr_decay"), std::string::npos) << e.what();
  }
}

// Note [optimizer state]: a server started from another's pulled state (its parameters, slots
// and step count) goes on exactly as that one does: the same pushes give both the same
// parameters, so nothing of the optimizer (Adam's moments and bias correction, Adagrad's sums and
// lr decay, RMSprop's buffers) restarts.
struct StateCase {
  const char* name;
  ps::Optimizer optimizer;
  bool centered;
  uint32_t slots;
};

class PsOptimizerState : public ::testing::TestWithParam<StateCase> {};

TEST_P(PsOptimizerState, AServerStartedFromAnothersStateGoesOnAsItWould) {
  const StateCase c = GetParam();
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = c.optimizer;
  r.centered = c.centered ? 1 : 0;
  r.lr_decay = c.optimizer == ps::Optimizer::kAdagrad ? 0.2 : c.optimizer == ps::Optimizer::kNadam ? 0.004 : 0.0;
  r.initial_accumulator = c.optimizer == ps::Optimizer::kAdagrad ? 0.1 : 0.0;
  ASSERT_EQ(ps::slotsOf(r.optimizer, c.centered), c.slots);
  const auto d = common::Deadline::after(10s);
  const auto gradient = [](int s) {
    return std::vector<float>{0.5f * static_cast<float>(s), -0.25f, 1.0f / static_cast<float>(s) - 0.3f};
  };
  ps::ShardState first("parameter server 0", 1);
  first.registerWorker(0, r, {1.0f, -2.0f, 0.5f}, d);
  for (int s = 1; s <= 4; ++s) first.push(0, static_cast<uint64_t>(s), gradient(s).data(), {0.1f, 0.9f}, d);
  const ps::OptimizerState state = first.optimizerState(0);
  EXPECT_EQ(state.step, 4u);
  ASSERT_EQ(state.slots.size(), 3u * c.slots);
  EXPECT_NE(state.slots, std::vector<float>(state.slots.size(), 0.0f));

  ps::Registration restart = r;
  restart.slots = c.slots;
  restart.optimizer_step = state.step;
  std::vector<float> initial = first.parameters();
  initial.insert(initial.end(), state.slots.begin(), state.slots.end());
  ps::ShardState second("parameter server 0", 1);
  second.registerWorker(0, restart, initial, d);
  EXPECT_EQ(second.optimizerState(0).slots, state.slots);
  for (int s = 5; s <= 8; ++s) {
    const auto a = first.push(0, static_cast<uint64_t>(s), gradient(s).data(), {0.1f, 0.9f}, d);
    const auto b = second.push(0, static_cast<uint64_t>(s - 4), gradient(s).data(), {0.1f, 0.9f}, d);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a.values[i], b.values[i]) << "push " << s << " element " << i;
  }
  EXPECT_EQ(second.optimizerState(0).step, 8u);
  EXPECT_EQ(second.optimizerState(0).slots, first.optimizerState(0).slots);

  // Without the state, the second server would have diverged (the test can fail).
  ps::ShardState fresh("parameter server 0", 1);
  fresh.registerWorker(0, r, first.parameters(), d);
  const auto a = first.push(0, 9, gradient(9).data(), {0.1f, 0.9f}, d);
  const auto b = fresh.push(0, 1, gradient(9).data(), {0.1f, 0.9f}, d);
  EXPECT_NE(std::vector<float>(a.values.begin(), a.values.end()), std::vector<float>(b.values.begin(), b.values.end()));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PsOptimizerState,
                         ::testing::Values(StateCase{"Sgd", ps::Optimizer::kSgd, false, 1},
                                           StateCase{"Adam", ps::Optimizer::kAdam, false, 2},
                                           StateCase{"Adagrad", ps::Optimizer::kAdagrad, false, 1},
                                           StateCase{"Rmsprop", ps::Optimizer::kRmsprop, false, 2},
                                           StateCase{"RmspropCentered", ps::Optimizer::kRmsprop, true, 3},
                                           StateCase{"Adamax", ps::Optimizer::kAdamax, false, 2},
                                           StateCase{"Adadelta", ps::Optimizer::kAdadelta, false, 2},
                                           StateCase{"Nadam", ps::Optimizer::kNadam, false, 2},
                                           StateCase{"Radam", ps::Optimizer::kRadam, false, 2}),
                         [](const ::testing::TestParamInfo<StateCase>& param) { return param.param.name; });

TEST(PsShardState, OptimizerStateIsRefusedWhereThereIsNone) {
  const auto d = common::Deadline::after(10s);
  ps::ShardState sync("parameter server 2", 1);
  sync.registerWorker(0, registration(ps::Mode::kSync, 1, 3), {}, d);
  try {
    sync.optimizerState(0);
    ADD_FAILURE() << "a sync server answered with an optimizer state";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter server 2: worker 0 asked for the optimizer's state"),
              std::string::npos)
        << e.what();
  }
  ps::Registration r = registration(ps::Mode::kAsync, 1, 3);
  r.optimizer = ps::Optimizer::kAdam;
  r.slots = 1;  // Adam keeps 2
  ps::ShardState async("parameter server 0", 1);
  EXPECT_THROW(async.registerWorker(0, r, std::vector<float>(6, 0.0f), d), InvalidArgumentError);
  r.slots = 2;
  EXPECT_THROW(async.registerWorker(0, r, std::vector<float>(6, 0.0f), d), InvalidArgumentError);  // 9 due
  async.registerWorker(0, r, std::vector<float>(9, 0.5f), d);
  EXPECT_EQ(async.optimizerState(0).slots, std::vector<float>(6, 0.5f));
}

TEST(PsShardState, BoundedStalenessHoldsTheFastWorker) {
  constexpr int kStaleness = 2, kSteps = 12;
  ps::ShardState state("parameter server 0", 2);
  std::atomic<int> slow_pushed{0};
  int max_lead = 0;
  std::string error;
  std::thread slow([&] {
    const auto d = common::Deadline::after(20s);
    state.registerWorker(1, registration(ps::Mode::kAsync, 2, 1, kStaleness), {0.0f}, d);
    for (int s = 1; s <= kSteps; ++s) {
      std::this_thread::sleep_for(10ms);  // the slow worker's compute
      const float g = 1.0f;
      ++slow_pushed;
      state.push(1, static_cast<uint64_t>(s), &g, {}, d);
    }
  });
  {
    const auto d = common::Deadline::after(20s);
    state.registerWorker(0, registration(ps::Mode::kAsync, 2, 1, kStaleness), {0.0f}, d);
    for (int s = 1; s <= kSteps; ++s) {
      const float g = 1.0f;
      const auto reply = state.push(0, static_cast<uint64_t>(s), &g, {}, d);
      // The slow worker's own count (taken before its push) bounds the server's view of it.
      const int lead = s - slow_pushed.load();
      max_lead = std::max(max_lead, lead);
      if (lead > kStaleness) error = "step " + std::to_string(s) + " is " + std::to_string(lead) + " ahead";
      EXPECT_LE(reply.step - reply.slowest, static_cast<uint64_t>(kStaleness));
    }
  }
  slow.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(max_lead, kStaleness) << "the fast worker runs ahead as far as allowed";
}

TEST(PsShardState, SyncFailsEveryWaitingWorkerWhenOneDies) {
  ps::ShardState state("parameter server 3", 2);
  const auto d = common::Deadline::after(10s);
  state.registerWorker(0, registration(ps::Mode::kSync, 2, 1), {}, d);
  state.registerWorker(1, registration(ps::Mode::kSync, 2, 1), {}, d);
  std::thread killer([&] {
    std::this_thread::sleep_for(50ms);
    state.leave(1, true, "connection closed");
  });
  const float g = 1;
  try {
    state.push(0, 1, &g, {}, d);
    ADD_FAILURE() << "push returned although worker 1 died";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter server 3: worker 1 died"), std::string::npos) << e.what();
  }
  killer.join();
}

// A worker that says goodbye between rounds (its client closed after another server failed, say)
// fails the next push of the others at once, not at its deadline: the round cannot complete.
TEST(PsShardState, SyncFailsAPushAfterAWorkerSaidGoodbyeBetweenRounds) {
  ps::ShardState state("parameter server 0", 2);
  const auto d = common::Deadline::after(10s);
  state.registerWorker(0, registration(ps::Mode::kSync, 2, 1), {}, d);
  state.registerWorker(1, registration(ps::Mode::kSync, 2, 1), {}, d);
  const float g = 1;
  std::thread other([&] { state.push(1, 1, &g, {}, d); });
  state.push(0, 1, &g, {}, d);
  other.join();
  state.leave(1, false, "");  // bye after step 1
  const auto started = std::chrono::steady_clock::now();
  try {
    state.push(0, 2, &g, {}, d);
    ADD_FAILURE() << "push returned although worker 1 left";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter server 0: worker 1 left after step 1"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
}

TEST(PsShardState, RegistrationsMustAgree) {
  ps::ShardState state("parameter server 0", 2);
  const auto d = common::Deadline::after(10s);
  state.registerWorker(0, registration(ps::Mode::kSync, 2, 4), {}, d);
  auto other = registration(ps::Mode::kSync, 2, 5);
  other.layout_hash = 7;
  EXPECT_THROW(state.registerWorker(1, other, {}, d), MismatchError);
  EXPECT_THROW(state.registerWorker(1, registration(ps::Mode::kSync, 3, 4), {}, d), MismatchError);
}

}  // namespace
}  // namespace hora::testing
