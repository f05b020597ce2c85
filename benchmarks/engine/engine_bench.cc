// engine-bench: a simulated backward pass through the engine.
//
//   horarun -np 2 engine-bench --model resnet50 --steps 20
//
// Each step submits the gradient tensors of a real model in reverse layer order, with the
// layer's compute time before each (a sleep: on a GPU the host thread waits while the device
// computes, leaving the CPU to the communication), then waits for all of them. It reports the
// step time against the compute alone and against one raw allreduce of all the step's bytes;
// communication is hidden when the step takes about max(compute, raw allreduce). It also
// reports the cost of a steady-state negotiation cycle (an idle engine cycling).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine-bench: a simulated backward pass through the hora engine"};
  std::string model = "resnet50";
  int steps = 20;
  double compute_ms = -1;
  app.add_option("--model", model, "resnet50 or wrn16-10")->check(CLI::IsMember({"resnet50", "wrn16-10"}));
  app.add_option("--steps", steps, "Timed steps (after 3 warm-up steps)")->check(CLI::Range(1, 100000));
  app.add_option("--compute-ms", compute_ms,
                 "Compute time of one backward pass, spread over the layers by parameter count; "
                 "default: the measured time of one raw allreduce of all gradients");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto sizes = hora::bench::gradientSizes(model);
    const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
    std::vector<std::vector<float>> grads;
    for (size_t n : sizes) grads.emplace_back(n, 1.0f);

    // One raw allreduce of every byte, on its own communicator.
    auto raw = hora::Communicator::fromEnvironment();
    const bool lead = raw->rank() == 0;
    std::vector<float> flat(total, 1.0f);
    std::vector<double> raw_ms;
    for (int i = 0; i < 3 + std::min(steps, 10); ++i) {
      raw->barrier();
      const auto t0 = Clock::now();
      raw->allreduce(flat.data(), flat.data(), total, DataType::kFloat32, {hora::ReduceOp::kAverage});
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      raw->allreduce(&ms, &ms, 1, DataType::kFloat64, {hora::ReduceOp::kMax});
      if (i >= 3) raw_ms.push_back(ms);
    }
    const double raw_median = median(raw_ms);
    if (compute_ms < 0) compute_ms = raw_median;
    raw->barrier();

    hora::Engine engine(hora::Communicator::fromEnvironment(), hora::EngineOptions::fromEnvironment());
    auto step = [&](bool communicate) {
      std::vector<hora::Handle> handles;
      handles.reserve(sizes.size());
      for (size_t k = sizes.size(); k-- > 0;) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(
            compute_ms * static_cast<double>(sizes[k]) / static_cast<double>(total)));
        if (!communicate) continue;
        hora::Request q;
        q.name = "grad." + std::to_string(k);
        q.shape = {static_cast<int64_t>(sizes[k])};
        q.input = q.output = grads[k].data();
        q.reduce = {hora::ReduceOp::kAverage};
        handles.push_back(engine.enqueue(std::move(q)));
      }
      for (auto& h : handles) h.wait();
    };
    hora::EngineStats before;  // after the warm-up steps of the last timeSteps
    auto timeSteps = [&](bool communicate) {
      std::vector<double> ms;
      for (int i = 0; i < 3 + steps; ++i) {
        if (i == 3) before = engine.stats();
        raw->barrier();
        const auto t0 = Clock::now();
        step(communicate);
        double m = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        raw->allreduce(&m, &m, 1, DataType::kFloat64, {hora::ReduceOp::kMax});
        if (i >= 3) ms.push_back(m);
      }
      return median(ms);
    };
    const double compute_only = timeSteps(false);
    const double step_ms = timeSteps(true);
    const hora::EngineStats after = engine.stats();

    engine.shutdown();
    // The steady-state negotiation cost: an idle engine with HORA_CYCLE_TIME=0 runs cycles back
    // to back in lockstep with the other ranks, each one control allreduce over the response
    // cache (primed with this model's names) plus its bookkeeping.
    double us_per_cycle = 0;
    {
      hora::EngineOptions busy = hora::EngineOptions::fromEnvironment();
      busy.cycle_time = std::chrono::microseconds(0);
      busy.timeline.clear();  // the timeline file belongs to the engine above
      hora::Engine spinning(hora::Communicator::fromEnvironment(), busy);
      std::vector<hora::Handle> handles;
      for (size_t k = 0; k < sizes.size(); ++k) {
        hora::Request q;
        q.name = "grad." + std::to_string(k);
        q.shape = {1};
        q.input = q.output = grads[k].data();
        handles.push_back(spinning.enqueue(std::move(q)));
      }
      for (auto& h : handles) h.wait();
      const auto c0 = spinning.stats().cycles;
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const auto c1 = spinning.stats().cycles;
      us_per_cycle = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                     static_cast<double>(std::max<uint64_t>(1, c1 - c0));
      raw->barrier();
    }
    if (lead) {
      std::printf("| model | ranks | tensors | MiB | compute (ms) | raw allreduce (ms) | step (ms) | "
                  "step / max(compute, raw) | cycles per step | full negotiations after warm-up | steady cycle (us) |\n");
      std::printf("| %s | %d | %zu | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %llu | %.1f |\n", model.c_str(),
                  raw->size(), sizes.size(), static_cast<double>(total) * 4 / (1 << 20), compute_only, raw_median,
                  step_ms, step_ms / std::max(compute_only, raw_median),
                  static_cast<double>(after.cycles - before.cycles) / steps,
                  static_cast<unsigned long long>(after.full_negotiations - before.full_negotiations), us_per_cycle);
    }
    raw->barrier();
    return 0;
  } catch (const hora::Error& e) {
    std::fprintf(stderr, "engine-bench: %s\n", e.what());
    return 3;
  }
}
