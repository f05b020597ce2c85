// The autotuner (Note [autotuning]): the optimiser on functions whose maximum is known, the
// ParameterManager's windows, samples, fixed knobs and log against a scripted job, and the
// engine applying the same parameters on every rank at the same cycle.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "engine/autotune/bayesian_optimizer.h"
#include "engine/autotune/parameter_manager.h"
#include "engine_test_util.h"
#include "expect_error.h"

namespace hora::testing {
namespace {

using engine::BayesianOptimizer;
using engine::ParameterManager;

// A smooth bump with its maximum (1.0) at `peak`, of width `w` (a Gaussian's 2 sigma^2).
double bump(const std::vector<double>& x, const std::vector<double>& peak, double w) {
  double d2 = 0;
  for (size_t i = 0; i < x.size(); ++i) d2 += (x[i] - peak[i]) * (x[i] - peak[i]);
  return std::exp(-d2 / w);
}

// Seen through Gaussian noise of 0.05: 30 samples in 2 dimensions, 60 in 5 (the autotuner's
// size). A random search of as many points gets as close (2 dimensions: within 0.05 of the peak;
// 5: within 0.23) with probability about 0.2 per seed, so for all three seeds below with about
// 0.01: the test fails for an optimiser that does not learn.
TEST(BayesianOptimizer, FindsTheMaximumOfANoisyFunctionWithinSixtySamples) {
  struct Case {
    int dims, samples;
    double width, threshold;
  };
  for (const Case& c : {Case{2, 30, 0.08, 0.97}, Case{5, 60, 0.5, 0.90}}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      std::mt19937_64 rng(seed * 977);
      std::normal_distribution<double> noise(0.0, 0.05);
      std::vector<double> peak;
      std::uniform_real_distribution<double> u(0.2, 0.8);
      for (int d = 0; d < c.dims; ++d) peak.push_back(u(rng));
      BayesianOptimizer bo(c.dims, 0.1, seed, 3);
      for (int i = 0; i < c.samples; ++i) {
        auto x = bo.next();
        bo.add(x, bump(x, peak, c.width) + noise(rng));
      }
      const auto& best = bo.sample(static_cast<size_t>(bo.bestSample()));
      double d2 = 0;
      for (size_t i = 0; i < best.size(); ++i) d2 += (best[i] - peak[i]) * (best[i] - peak[i]);
      EXPECT_GT(bump(best, peak, c.width), c.threshold) << c.dims << " dims, seed " << seed
                                                       << ": best at distance " << std::sqrt(d2);
    }
  }
}

TEST(BayesianOptimizer, TheBestSampleIsChosenByThePosteriorNotByTheLuckiestScore) {
  // Two points: one scored once high by luck among low neighbours, one consistently good.
  BayesianOptimizer bo(1, 0.5, 1, 1);
  for (double x : {0.10, 0.12, 0.14, 0.16}) bo.add({x}, 1.0);
  bo.add({0.13}, 1.6);  // a lucky draw amid scores of 1
  for (double x : {0.80, 0.82, 0.84, 0.86, 0.88}) bo.add({x}, 1.4);
  const double chosen = bo.sample(static_cast<size_t>(bo.bestSample()))[0];
  EXPECT_GT(chosen, 0.5) << "the lucky single score won";
}

TEST(BayesianOptimizer, RefusesPointsOfTheWrongDimension) {
  BayesianOptimizer bo(2, 0.1);
  expectInvalid([&] { bo.add({0.5}, 1.0); }, "a point of 1 coordinates for 2 dimensions");
}

// A scripted job for the ParameterManager: steps of `tensors` names of `bytes` each, whose
// duration depends on the parameters in force through `step_seconds`.
struct ScriptedJob {
  int tensors = 4;
  size_t bytes = 1 << 20;
  ParameterManager::Clock::time_point now{};
  std::vector<TunedParameters> applied;

  // Runs one step, a cycle per tensor; returns true when the manager asks to ship a proposal.
  bool step(ParameterManager& pm, double seconds) {
    bool ship = false;
    for (int t = 0; t < tensors; ++t) {
      now += std::chrono::duration_cast<ParameterManager::Clock::duration>(std::chrono::duration<double>(seconds / tensors));
      ship = pm.record({{indexed("grad.", t), bytes}}, now) || ship;
    }
    return ship;
  }
  // Steps until the search ends; shipping and applying as the Runtime does.
  void run(ParameterManager& pm, const std::function<double(const TunedParameters&)>& step_seconds,
           TunedParameters current, int max_steps = 10000) {
    for (int i = 0; i < max_steps && !pm.done(); ++i) {
      if (step(pm, step_seconds(current))) {
        current = pm.apply(pm.proposal(), now);
        applied.push_back(current);
      }
    }
  }
};

TunedParameters defaults() {
  EngineOptions o;
  return {o.fusion_threshold, o.cycle_time, true, 4096, o.bucket_bytes, HierarchyChoice::kAuto,
          HierarchyChoice::kAuto};
}

AutotuneOptions tuneOptions(int warmup, int steps, int samples) {
  AutotuneOptions a;
  a.enabled = true;
  a.warmup_samples = warmup;
  a.steps_per_sample = steps;
  a.max_samples = samples;
  a.noise = 0.1;
  return a;
}

std::vector<std::string> lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(ParameterManager, ScoresWindowsOfStepsAndEndsOnTheBestParameters) {
  // The job is fastest with a bucket near 8 MiB and a fusion threshold near 4 MiB (log scale).
  const auto seconds = [](const TunedParameters& p) {
    const double b = std::log2(static_cast<double>(p.bucket_bytes)) - 23;
    const double f = std::log2(static_cast<double>(p.fusion_threshold)) - 22;
    return 0.1 * (1 + 0.05 * b * b + 0.03 * f * f);
  };
  const std::string log = ::testing::TempDir() + "autotune_windows.csv";
  AutotuneOptions a = tuneOptions(2, 3, 25);
  a.log = log;
  ParameterManager pm(a, defaults(), "HORA_SHM_RING_THRESHOLD", false, true);
  EXPECT_EQ(pm.tunedKnobs(), (std::vector<std::string>{"HORA_FUSION_THRESHOLD", "HORA_CYCLE_TIME",
                                                        "HORA_CACHE_CAPACITY", "HORA_SHM_RING_THRESHOLD",
                                                        "HORA_BUCKET_BYTES"}))
      << "one host: the hierarchical choices are left out";
  ScriptedJob job;
  job.run(pm, seconds, defaults());
  ASSERT_TRUE(pm.done());
  ASSERT_EQ(job.applied.size(), 25u) << "24 proposals and the final parameters";
  const TunedParameters best = job.applied.back();
  EXPECT_LT(seconds(best), seconds(defaults()));
  EXPECT_LT(std::abs(std::log2(static_cast<double>(best.bucket_bytes)) - 23), 1.5) << best.bucket_bytes;

  const auto rows = lines(log);
  ASSERT_EQ(rows.size(), 1u + 25u + 1u) << "header, a row per sample, the best row";
  EXPECT_EQ(rows[0], "hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,"
                     "tensor_fusion_threshold,ring_threshold,bucket_bytes,score");
  // The first scored sample is the defaults: 3 steps of 4 MiB in 0.3 s * (1 + penalties).
  EXPECT_EQ(rows[1].substr(0, rows[1].rfind(',')), "auto,auto,1,1,128,4096,1048576");
  const double expected = 3.0 * 4 * (1 << 20) / (seconds(defaults()) * 3 * 1e6);
  EXPECT_NEAR(std::stod(rows[1].substr(rows[1].rfind(',') + 1)), expected, expected * 1e-3);
  for (const auto& r : rows) EXPECT_EQ(std::count(r.begin(), r.end(), ','), 7) << r;
}

TEST(ParameterManager, NeverEndsWorseThanTheDefaultsWhenTheyAreBest) {
  // Every departure from the defaults costs time.
  const TunedParameters d = defaults();
  const auto seconds = [&](const TunedParameters& p) {
    const double penalty = std::abs(std::log2(static_cast<double>(p.bucket_bytes)) - 20) +
                           std::abs(std::log2(static_cast<double>(p.fusion_threshold)) - 27) +
                           (p.cache_enabled ? 0 : 1) + std::abs(static_cast<double>(p.cycle_time.count()) - 1000) / 1000;
    return 0.1 * (1 + 0.2 * penalty);
  };
  ParameterManager pm(tuneOptions(1, 2, 12), d, "HORA_SHM_RING_THRESHOLD", false, true);
  ScriptedJob job;
  job.run(pm, seconds, d);
  ASSERT_TRUE(pm.done());
  EXPECT_EQ(job.applied.back(), d);
}

TEST(ParameterManager, KnobsTheUserSetStayAsTheyAre) {
  AutotuneOptions a = tuneOptions(0, 2, 10);
  a.fixed = {"HORA_FUSION_THRESHOLD", "HORA_BUCKET_BYTES", "HORA_RING_THRESHOLD"};
  TunedParameters start = defaults();
  start.fusion_threshold = 3 << 20;
  start.bucket_bytes = 5 << 20;
  start.hierarchical_allreduce = HierarchyChoice::kNever;
  ParameterManager pm(a, start, "HORA_RING_THRESHOLD", true, true);
  EXPECT_EQ(pm.tunedKnobs(), (std::vector<std::string>{"HORA_CYCLE_TIME", "HORA_CACHE_CAPACITY",
                                                        "HORA_HIERARCHICAL_ALLREDUCE", "HORA_HIERARCHICAL_ALLGATHER"}));
  ScriptedJob job;
  job.run(pm, [](const TunedParameters& p) { return p.cache_enabled ? 0.1 : 0.2; }, start);
  ASSERT_TRUE(pm.done());
  bool varied = false;
  for (const auto& p : job.applied) {
    EXPECT_EQ(p.fusion_threshold, start.fusion_threshold);
    EXPECT_EQ(p.bucket_bytes, start.bucket_bytes);
    EXPECT_EQ(p.ring_threshold, start.ring_threshold);
    varied = varied || p.hierarchical_allreduce != start.hierarchical_allreduce || p.cycle_time != start.cycle_time;
  }
  EXPECT_TRUE(varied) << "the free knobs were not searched";
  EXPECT_TRUE(job.applied.back().cache_enabled);
}

TEST(ParameterManager, TheWireFormRoundTrips) {
  TunedParameters p{(size_t{1} << 40) + 3, std::chrono::microseconds(2340), false, 12345, 777,
                    HierarchyChoice::kAlways, HierarchyChoice::kNever};
  bool final = false;
  EXPECT_EQ(ParameterManager::decode(ParameterManager::encode(p, true), &final), p);
  EXPECT_TRUE(final);
}

TEST(ParameterManager, AnUnwritableLogIsRefusedNamingTheKnob) {
  AutotuneOptions a = tuneOptions(0, 1, 2);
  a.log = "/nonexistent-dir/at.csv";
  expectInvalid([&] { ParameterManager pm(a, defaults(), "HORA_RING_THRESHOLD", false, true); },
                "HORA_AUTOTUNE_LOG=/nonexistent-dir/at.csv");
}

// Whether the search has ended on every rank. A rank's engine may apply the final parameters in
// a cycle another rank's next step started before this rank looked, so the ranks agree (a Min
// allreduce) before they stop stepping together.
bool everyRankSawTheEnd(Engine& e) {
  const auto h = e.tuningHistory();
  std::vector<float> flag(1);
  submitFilled(e, "search ended", flag, !h.empty() && h.back().final ? 1.0f : 0.0f, ReduceOp::kMin).wait(20s);
  return flag[0] == 1.0f;
}

// Every rank applies the same parameters at the same cycle, the allreduces stay right while the
// parameters change under them, and the knobs the user set are never touched.
TEST(Autotune, EveryRankAppliesTheSameParametersAtTheSameCycle) {
  const int n = 3;
  EngineOptions o;
  o.fusion_threshold = 96 << 10;
  o.autotune = tuneOptions(1, 2, 8);
  o.autotune.fixed = {"HORA_FUSION_THRESHOLD"};
  std::vector<std::vector<TuningRecord>> histories(n);
  expectNoErrors(runEngines(n, [&](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) + 3u);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    // Steps of 40 tensors until the search has ended.
    while (std::chrono::steady_clock::now() < deadline) {
      submitAndCheck(e, 1, 40, 2, 3000, rng);
      if (everyRankSawTheEnd(e)) break;
    }
    e.barrier().wait(20s);
    histories[static_cast<size_t>(e.identity().rank)] = e.tuningHistory();
  }, o));
  ASSERT_FALSE(histories[0].empty());
  EXPECT_TRUE(histories[0].back().final) << "the search did not end within 60 s";
  EXPECT_EQ(histories[0].size(), 8u) << "7 proposals after the defaults' sample, then the final parameters";
  bool varied = false;
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(histories[static_cast<size_t>(r)].size(), histories[0].size()) << "rank " << r;
    for (size_t i = 0; i < histories[0].size(); ++i) {
      EXPECT_EQ(histories[static_cast<size_t>(r)][i].cycle, histories[0][i].cycle) << "rank " << r << ", record " << i;
      EXPECT_EQ(histories[static_cast<size_t>(r)][i].parameters, histories[0][i].parameters) << "rank " << r;
    }
  }
  for (const auto& rec : histories[0]) {
    EXPECT_EQ(rec.parameters.fusion_threshold, size_t{96} << 10) << "a fixed knob was tuned";
    varied = varied || rec.parameters.bucket_bytes != o.bucket_bytes;
  }
  EXPECT_TRUE(varied);
}

// Two pretend hosts: the hierarchical choices join the search, the plan switches between the
// flat and the hierarchical allreduce under running steps, and every result stays right.
TEST(Autotune, AcrossHostsTheHierarchicalChoicesAreTunedToo) {
  const int n = 4;
  EngineOptions o;
  o.autotune = tuneOptions(1, 2, 20);
  // Starting flat, so that the first of the search's (seeded) random points that picks `auto`
  // switches the hierarchy on under running steps.
  CommunicatorOptions flat = testOptions();
  flat.hierarchical = flat.hierarchical_allgather = HierarchyChoice::kNever;
  // The plan's knobs only, so that the samples search them.
  o.autotune.fixed = {"HORA_FUSION_THRESHOLD", "HORA_CYCLE_TIME", "HORA_CACHE_CAPACITY", "HORA_BUCKET_BYTES"};
  std::vector<std::vector<TuningRecord>> histories(n);
  expectNoErrors(runEngines(n, [&](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) + 9u);
    const auto deadline = std::chrono::steady_clock::now() + 90s;
    while (std::chrono::steady_clock::now() < deadline) {
      submitAndCheck(e, 1, 30, 1, 40000, rng);
      if (everyRankSawTheEnd(e)) break;
    }
    e.barrier().wait(20s);
    histories[static_cast<size_t>(e.identity().rank)] = e.tuningHistory();
  }, o, flat, {"a", "b", "a", "b"}));
  ASSERT_EQ(histories[0].size(), 20u);
  bool switched = false;
  for (int r = 1; r < n; ++r)
    for (size_t i = 0; i < histories[0].size(); ++i)
      EXPECT_EQ(histories[static_cast<size_t>(r)][i].parameters, histories[0][i].parameters) << "rank " << r;
  for (const auto& rec : histories[0])
    switched = switched || rec.parameters.hierarchical_allreduce != HierarchyChoice::kNever ||
               rec.parameters.hierarchical_allgather != HierarchyChoice::kNever;
  EXPECT_TRUE(switched) << "the search never switched the hierarchy on";
}

TEST(Autotune, WithoutHoraAutotuneNothingIsTuned) {
  expectNoErrors(runEngines(2, [&](Engine& e) {
    std::mt19937 rng(5);
    submitAndCheck(e, 30, 20, 1, 100, rng);
    EXPECT_TRUE(e.tuningHistory().empty());
  }));
}

}  // namespace
}  // namespace hora::testing
