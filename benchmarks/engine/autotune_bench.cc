// autotune-bench: the autotuner (HORA_AUTOTUNE) against an exhaustive grid over the same knobs,
// on engine-bench's simulated backward pass, all in one run.
//
//   horarun -np 2 autotune-bench --model resnet50
//
// 1. Grid: for every configuration of the grid (fusion threshold x bucket bytes x ring threshold
//    x cache on/off x cycle time), a fresh Engine runs warm-up steps, then timed steps; the
//    configuration's step time is their median.
// 2. Autotune: an Engine with HORA_AUTOTUNE runs steps until its search ends (every rank agrees
//    through an allreduce after each step), then reports the parameters it kept.
// 3. Comparison: the defaults, the grid's best configuration and the autotuned parameters are
//    measured again, interleaved over several rounds, so that all three see the same machine;
//    the medians are reported (and every round's value).
// The compute of a step is, as in engine-bench, one raw allreduce of all gradients spread over
// the layers, unless --compute-ms is given. Step times are the slowest rank's.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hora/communicator.h"
#include "hora/engine.h"
#include "hora/errors.h"
#include "models.h"

namespace {

using Clock = std::chrono::steady_clock;
using hora::DataType;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Config {
  size_t fusion, bucket, ring;
  bool cache;
  double cycle_ms;
};

std::string describe(const Config& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "fusion %.3g MiB, bucket %.3g MiB, ring %.3g KiB, cache %s, cycle %.2g ms",
                static_cast<double>(c.fusion) / (1 << 20), static_cast<double>(c.bucket) / (1 << 20),
                static_cast<double>(c.ring) / 1024, c.cache ? "on" : "off", c.cycle_ms);
  return buf;
}

class Bench {
 public:
  Bench(std::vector<size_t> sizes, double compute_ms, hora::Communicator& raw)
      : sizes_(std::move(sizes)), raw_(raw) {
    total_ = std::accumulate(sizes_.begin(), sizes_.end(), size_t{0});
    for (size_t n : sizes_) grads_.emplace_back(n, 1.0f);
    compute_ms_ = compute_ms;
  }
  size_t total() const { return total_; }

  // One simulated backward pass through `engine`; returns the slowest rank's time in ms.
  double step(hora::Engine& engine) {
    raw_.barrier();
    const auto t0 = Clock::now();
    std::vector<hora::Handle> handles;
    for (size_t k = sizes_.size(); k-- > 0;) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(
          compute_ms_ * static_cast<double>(sizes_[k]) / static_cast<double>(total_)));
      hora::Request q;
      q.name = "grad." + std::to_string(k);
      q.shape = {static_cast<int64_t>(sizes_[k])};
      q.input = q.output = grads_[k].data();
      q.reduce = {hora::ReduceOp::kAverage};
      handles.push_back(engine.enqueue(std::move(q)));
    }
    for (auto& h : handles) h.wait(std::chrono::seconds(120));
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    raw_.allreduce(&ms, &ms, 1, DataType::kFloat64, {hora::ReduceOp::kMax});
    return ms;
  }

  double medianStep(hora::Engine& engine, int warmup, int steps) {
    for (int i = 0; i < warmup; ++i) step(engine);
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) ms.push_back(step(engine));
    return median(ms);
  }

 private:
  std::vector<size_t> sizes_;
  hora::Communicator& raw_;
  size_t total_ = 0;
  double compute_ms_ = 0;
  std::vector<std::vector<float>> grads_;
};

std::unique_ptr<hora::Engine> engineFor(const Config& c) {
  auto comm = hora::Communicator::fromEnvironment();
  auto plan = comm->planTuning();
  plan.ring_threshold_bytes = c.ring;
  comm->setPlanTuning(plan);  // before any collective of this communicator: alike on every rank
  hora::EngineOptions o = hora::EngineOptions::fromEnvironment();
  o.autotune.enabled = false;
  o.fusion_threshold = c.fusion;
  o.bucket_bytes = c.bucket;
  o.cache_capacity = c.cache ? 1024 : 0;
  o.cycle_time = std::chrono::microseconds(static_cast<int64_t>(c.cycle_ms * 1000));
  return std::make_unique<hora::Engine>(std::move(comm), o);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"autotune-bench: the autotuner against an exhaustive grid on a simulated backward pass"};
  std::string model = "resnet50";
  double compute_ms = -1;
  int grid_steps = 5, rounds = 3, compare_steps = 7, samples = 60, steps_per_sample = 5;
  app.add_option("--model", model, "resnet50 or wrn16-10")->check(CLI::IsMember({"resnet50", "wrn16-10"}));
  app.add_option("--compute-ms", compute_ms, "Compute of one backward pass (default: one raw allreduce's time)");
  app.add_option("--grid-steps", grid_steps, "Timed steps per grid configuration (after 2 warm-up steps)");
  app.add_option("--rounds", rounds, "Interleaved rounds of the final comparison");
  app.add_option("--compare-steps", compare_steps, "Timed steps per configuration and round of the comparison");
  app.add_option("--samples", samples, "HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES of the autotuned engine");
  app.add_option("--steps-per-sample", steps_per_sample, "HORA_AUTOTUNE_STEPS_PER_SAMPLE of the autotuned engine");
  CLI11_PARSE(app, argc, argv);
  try {
    auto raw = hora::Communicator::fromEnvironment();
    const bool lead = raw->rank() == 0;
    const auto sizes = hora::bench::gradientSizes(model);
    const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
    if (compute_ms < 0) {
      std::vector<float> flat(total, 1.0f);
      std::vector<double> ms;
      for (int i = 0; i < 8; ++i) {
        raw->barrier();
        const auto t0 = Clock::now();
        raw->allreduce(flat.data(), flat.data(), total, DataType::kFloat32, {hora::ReduceOp::kAverage});
        double m = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        raw->allreduce(&m, &m, 1, DataType::kFloat64, {hora::ReduceOp::kMax});
        if (i >= 3) ms.push_back(m);
      }
      compute_ms = median(ms);
    }
    Bench bench(sizes, compute_ms, *raw);

    // The defaults as the registry has them (the environment may not set tuned knobs).
    const hora::EngineOptions d = hora::EngineOptions::fromEnvironment();
    Config defaults{d.fusion_threshold, d.bucket_bytes, 0, d.cache_capacity > 0,
                    static_cast<double>(d.cycle_time.count()) / 1000};
    {
      auto c = hora::Communicator::fromEnvironment();
      defaults.ring = c->planTuning().ring_threshold_bytes;
    }

    // 1. The grid.
    std::vector<Config> grid;
    for (size_t fusion : {size_t{1} << 20, size_t{128} << 20})
      for (size_t bucket : {size_t{256} << 10, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20})
        for (size_t ring : {size_t{4} << 10, size_t{256} << 10, size_t{4} << 20})
          for (bool cache : {true, false})
            for (double cycle : {0.0, 1.0}) grid.push_back({fusion, bucket, ring, cache, cycle});
    const auto grid_t0 = Clock::now();
    size_t best = 0;
    std::vector<double> grid_ms;
    for (size_t i = 0; i < grid.size(); ++i) {
      auto engine = engineFor(grid[i]);
      grid_ms.push_back(bench.medianStep(*engine, 2, grid_steps));
      engine->shutdown();
      if (grid_ms[i] < grid_ms[best]) best = i;
    }
    const double grid_seconds = std::chrono::duration<double>(Clock::now() - grid_t0).count();

    // 2. The autotuner.
    hora::EngineOptions tuned_options = hora::EngineOptions::fromEnvironment();
    tuned_options.autotune.enabled = true;
    tuned_options.autotune.max_samples = samples;
    tuned_options.autotune.steps_per_sample = steps_per_sample;
    const auto tune_t0 = Clock::now();
    int tune_steps = 0;
    Config tuned = defaults;
    size_t applied = 0;
    {
      hora::Engine engine(hora::Communicator::fromEnvironment(), tuned_options);
      while (true) {
        bench.step(engine);
        ++tune_steps;
        const auto h = engine.tuningHistory();
        int32_t done = !h.empty() && h.back().final ? 1 : 0;
        raw->allreduce(&done, &done, 1, DataType::kInt32, {hora::ReduceOp::kMin});
        if (done) {
          const hora::TunedParameters& p = h.back().parameters;
          tuned = {p.fusion_threshold, p.bucket_bytes, p.ring_threshold, p.cache_enabled,
                   static_cast<double>(p.cycle_time.count()) / 1000};
          applied = h.size();
          break;
        }
        if (tune_steps > 100000) throw hora::InternalError("the autotuner did not finish");
      }
      engine.shutdown();
    }
    const double tune_seconds = std::chrono::duration<double>(Clock::now() - tune_t0).count();

    // 3. Interleaved comparison.
    const Config contenders[3] = {defaults, grid[best], tuned};
    std::vector<double> rounds_ms[3];
    for (int r = 0; r < rounds; ++r) {
      for (int c = 0; c < 3; ++c) {
        auto engine = engineFor(contenders[c]);
        rounds_ms[c].push_back(bench.medianStep(*engine, 2, compare_steps));
        engine->shutdown();
      }
    }
    if (lead) {
      const double def = median(rounds_ms[0]), grd = median(rounds_ms[1]), aut = median(rounds_ms[2]);
      auto list = [](const std::vector<double>& v) {
        std::string s;
        for (double x : v) s += (s.empty() ? "" : " / ") + std::to_string(x).substr(0, std::to_string(x).find('.') + 2);
        return s;
      };
      std::printf("model %s, %d ranks, compute %.1f ms, grid of %zu configurations in %.0f s, autotune %zu "
                  "parameter sets over %d steps in %.0f s\n",
                  model.c_str(), raw->size(), compute_ms, grid.size(), grid_seconds, applied, tune_steps, tune_seconds);
      std::printf("  defaults: %s\n  grid best (%.1f ms in the grid): %s\n  autotuned: %s\n", describe(defaults).c_str(),
                  grid_ms[best], describe(grid[best]).c_str(), describe(tuned).c_str());
      std::printf("| model | ranks | defaults (ms) | grid best (ms) | autotuned (ms) | autotuned / grid best | "
                  "autotuned / defaults | rounds: defaults | grid best | autotuned | tuning steps |\n");
      std::printf("| %s | %d | %.1f | %.1f | %.1f | %.3f | %.3f | %s | %s | %s | %d |\n", model.c_str(), raw->size(),
                  def, grd, aut, aut / grd, aut / def, list(rounds_ms[0]).c_str(), list(rounds_ms[1]).c_str(),
                  list(rounds_ms[2]).c_str(), tune_steps);
    }
    raw->barrier();
    return 0;
  } catch (const hora::Error& e) {
    std::fprintf(stderr, "autotune-bench: %s\n", e.what());
    return 3;
  }
}
