// The engine's execution with real ranks: fusion around the threshold with mixed types, ops and
// scales, a small cache with constant eviction, and every collective besides allreduce.
#include <gtest/gtest.h>
#include <random>

#include "engine_test_util.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

TEST(Engine, SmallCacheAndTinyFusionThresholdStayCorrect) {
  EngineOptions o;
  o.cache_capacity = 7;        // far fewer slots than names: constant eviction
  o.fusion_threshold = 1000;   // groups of a few tensors, some alone
  expectNoErrors(runEngines(2, [](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) + 1);
    submitAndCheck(e, 4, 60, 2, 300, rng);
  }, o));
}

TEST(Engine, FusionWithMixedTypesOpsAndScales) {
  EngineOptions o;
  o.fusion_threshold = 4096;
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    std::vector<std::vector<float>> f(20);
    std::vector<std::vector<int32_t>> i(20);
    std::vector<Handle> hs;
    for (int t = 0; t < 20; ++t) {
      // Sizes around the threshold: 1000 floats = 4000 bytes, 1100 floats = 4400 bytes.
      f[static_cast<size_t>(t)].assign(t % 2 ? 1000 : 1100, static_cast<float>(r + 1));
      i[static_cast<size_t>(t)].assign(static_cast<size_t>(t + 1), r + 1);
      Request a;
      a.name = indexed("f", t);
      a.type = DataType::kFloat32;
      a.shape = {static_cast<int64_t>(f[static_cast<size_t>(t)].size())};
      a.input = a.output = f[static_cast<size_t>(t)].data();
      a.reduce = t % 3 ? AllreduceOptions{ReduceOp::kAverage} : AllreduceOptions{ReduceOp::kSum, 2.0, 0.5};
      hs.push_back(e.enqueue(a));
      Request b;
      b.name = indexed("i", t);
      b.type = DataType::kInt32;
      b.shape = {t + 1};
      b.input = b.output = i[static_cast<size_t>(t)].data();
      b.reduce = {t % 2 ? ReduceOp::kMax : ReduceOp::kSum};
      hs.push_back(e.enqueue(b));
    }
    for (auto& h : hs) h.wait(60s);
    for (int t = 0; t < 20; ++t) {
      const float want_f = t % 3 ? 2.0f : 6.0f;  // average of 1,2,3; or (2+4+6)*0.5
      for (float v : f[static_cast<size_t>(t)]) ASSERT_EQ(v, want_f) << "f" << t;
      const int want_i = t % 2 ? 3 : 6;
      for (int v : i[static_cast<size_t>(t)]) ASSERT_EQ(v, want_i) << "i" << t;
    }
  }, o));
}

TEST(Engine, AllgatherAlltoallBroadcastReducescatter) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank, n = e.identity().size;
    // allgather with different first dimensions: rank r has r + 1 rows of 2.
    std::vector<int64_t> rows(static_cast<size_t>(2 * (r + 1)), r);
    std::vector<int64_t> gathered;
    Request g;
    g.name = "gather";
    g.op = CollectiveKind::kAllgather;
    g.type = DataType::kInt64;
    g.shape = {r + 1, 2};
    g.input = rows.data();
    g.allocate_output = [&](const std::vector<int64_t>& shape) {
      gathered.resize(static_cast<size_t>(shape[0] * shape[1]));
      return gathered.data();
    };
    auto hg = e.enqueue(g);
    // alltoall: rank r sends d + 1 rows to rank d, each row = 100 * r + d.
    std::vector<int64_t> splits, send;
    for (int d = 0; d < n; ++d) {
      splits.push_back(d + 1);
      for (int k = 0; k <= d; ++k) send.push_back(100 * r + d);
    }
    std::vector<int64_t> received;
    Request a;
    a.name = "a2a";
    a.op = CollectiveKind::kAlltoall;
    a.type = DataType::kInt64;
    a.shape = {static_cast<int64_t>(send.size())};
    a.splits = splits;
    a.input = send.data();
    a.allocate_output = [&](const std::vector<int64_t>& shape) {
      received.resize(static_cast<size_t>(shape[0]));
      return received.data();
    };
    auto ha = e.enqueue(a);
    // broadcast from rank 1, out of place.
    std::vector<float> src(5, static_cast<float>(r * 10)), dst(5, -1);
    Request b;
    b.name = "bcast";
    b.op = CollectiveKind::kBroadcast;
    b.type = DataType::kFloat32;
    b.shape = {5};
    b.root = 1;
    b.input = src.data();
    b.output = dst.data();
    auto hb = e.enqueue(b);
    // reducescatter of 7 rows of 1: ranks get 3, 2, 2 rows.
    std::vector<float> full(7, 1.0f), part;
    Request s;
    s.name = "rs";
    s.op = CollectiveKind::kReducescatter;
    s.type = DataType::kFloat32;
    s.shape = {7, 1};
    s.input = full.data();
    s.allocate_output = [&](const std::vector<int64_t>& shape) {
      part.resize(static_cast<size_t>(shape[0]));
      return part.data();
    };
    auto hs = e.enqueue(s);
    hg.wait(60s);
    ha.wait(60s);
    hb.wait(60s);
    hs.wait(60s);
    std::vector<int64_t> want_g;
    for (int s2 = 0; s2 < n; ++s2)
      for (int k = 0; k < 2 * (s2 + 1); ++k) want_g.push_back(s2);
    EXPECT_EQ(gathered, want_g);
    EXPECT_EQ(hg.outputShape(), (std::vector<int64_t>{6, 2}));
    std::vector<int64_t> want_a;
    for (int s2 = 0; s2 < n; ++s2)
      for (int k = 0; k <= r; ++k) want_a.push_back(100 * s2 + r);
    EXPECT_EQ(received, want_a);
    EXPECT_EQ(dst, std::vector<float>(5, 10.0f));
    EXPECT_EQ(part, std::vector<float>(r == 0 ? 3 : 2, 3.0f));
  }));
}

}  // namespace
}  // namespace hora::testing
