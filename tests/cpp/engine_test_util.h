// Helpers shared by the engine's tests (engine_*_test.cc): tensors submitted by several threads
// in each rank's own order, and checked against closed forms.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "hora/engine.h"

namespace hora::testing {

using namespace std::chrono_literals;

// prefix + number (written so, not with operator+, to dodge a GCC 12 -Wrestrict false positive).
inline std::string indexed(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

inline void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Tensor t of step s on rank r holds (r + 1) * (t + s + 1) at every element; the allreduce sum
// is (t + s + 1) * n(n+1)/2.
struct Tensor {
  std::string name;
  std::vector<double> data;
};

inline void submitAndCheck(Engine& e, int steps, int tensors, int threads, size_t max_len, std::mt19937& rng) {
  const int n = e.identity().size, r = e.identity().rank;
  for (int step = 0; step < steps; ++step) {
    std::vector<Tensor> ts(static_cast<size_t>(tensors));
    for (int t = 0; t < tensors; ++t)
      ts[static_cast<size_t>(t)] = {indexed("grad.", t),
                                    std::vector<double>(1 + static_cast<size_t>(t) * 7 % max_len,
                                                        (r + 1.0) * (t + step + 1))};
    // Every rank submits in its own order, from several threads.
    std::vector<int> order(static_cast<size_t>(tensors));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Handle> handles(static_cast<size_t>(tensors), Handle(nullptr));
    std::vector<std::thread> submitters;
    for (int k = 0; k < threads; ++k)
      submitters.emplace_back([&, k] {
        for (size_t i = static_cast<size_t>(k); i < order.size(); i += static_cast<size_t>(threads)) {
          auto& t = ts[static_cast<size_t>(order[i])];
          Request req;
          req.name = t.name;
          req.type = DataType::kFloat64;
          req.shape = {static_cast<int64_t>(t.data.size())};
          req.input = t.data.data();
          req.output = t.data.data();
          handles[static_cast<size_t>(order[i])] = e.enqueue(std::move(req));
        }
      });
    for (auto& s : submitters) s.join();
    for (int t = 0; t < tensors; ++t) {
      handles[static_cast<size_t>(t)].wait(60s);
      const double want = (t + step + 1) * n * (n + 1) / 2.0;
      for (double v : ts[static_cast<size_t>(t)].data) ASSERT_EQ(v, want) << "tensor " << t << " step " << step;
    }
  }
}

// Allreduce `value` (one float, or a 600k-float tensor that is never fused) named `name`.
inline Handle submitFilled(Engine& e, const std::string& name, std::vector<float>& buf, float value, ReduceOp op,
                    int process_set = 0) {
  std::fill(buf.begin(), buf.end(), value);
  Request q;
  q.name = name;
  q.shape = {static_cast<int64_t>(buf.size())};
  q.input = q.output = buf.data();
  q.reduce = {op};
  q.process_set = process_set;
  return e.enqueue(q);
}

}  // namespace hora::testing
