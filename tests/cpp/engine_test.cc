// The engine with real ranks: out-of-order submission from several threads, many tensors per
// step over many steps (the response cache), fusion around the threshold with mixed types,
// every collective, every mismatch kind, duplicates, stalls, shutdown and re-creation, and a
// rank killed in the middle of a fused step.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <thread>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/timeline.h"
#include "harness.h"
#include "hora/errors.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

// prefix + number (written so, not with operator+, to dodge a GCC 12 -Wrestrict false positive).
std::string indexed(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Tensor t of step s on rank r holds (r + 1) * (t + s + 1) at every element; the allreduce sum
// is (t + s + 1) * n(n+1)/2.
struct Tensor {
  std::string name;
  std::vector<double> data;
};

void submitAndCheck(Engine& e, int steps, int tensors, int threads, size_t max_len, std::mt19937& rng) {
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

TEST(Engine, ManyTensorsOutOfOrderFromSeveralThreadsOverManySteps) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) * 7919u);
    submitAndCheck(e, 6, 1000, 3, 64, rng);
  }));
}

// Two pretend hosts, ranks alternating: the engine's idle waits and its fused collectives over
// the mixed transport (shared memory to one peer, TCP to two), and the hierarchical allreduce
// for the large fused buffers. A rank that starts its steps late wakes the idle others.
TEST(Engine, OnTwoHostsTheMixedTransportWakesAndCarriesTheEngine) {
  expectNoErrors(runEngines(4, [](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) * 31u + 5u);
    if (e.identity().rank == 3) std::this_thread::sleep_for(300ms);
    submitAndCheck(e, 4, 200, 2, 40000, rng);
  }, {}, testOptions(), {"a", "b", "a", "b"}));
}

TEST(Engine, SteadyStateNeedsNoFullNegotiation) {
  expectNoErrors(runEngines(2, [](Engine& e) {
    std::mt19937 rng(static_cast<unsigned>(e.identity().rank) + 11);
    submitAndCheck(e, 1, 100, 1, 16, rng);  // first step: names negotiated in full, then cached
    const EngineStats before = e.stats();
    submitAndCheck(e, 5, 100, 2, 16, rng);
    const EngineStats after = e.stats();
    EXPECT_EQ(after.full_negotiations, before.full_negotiations) << "cached names were negotiated again";
    EXPECT_EQ(after.cached_responses - before.cached_responses, 500u);
    EXPECT_GT(after.fused_allreduces, before.fused_allreduces);
  }));
}

// Note [buckets]: allreduces below HORA_BUCKET_BYTES that nobody waits for start no cycle; a
// poll (or a wait) asks for them and they all run; a bucket's worth starts a cycle by itself.
TEST(Engine, AllreducesWaitForABucketOrForSomeoneWhoWantsThem) {
  EngineOptions o;
  o.bucket_bytes = 64 << 10;
  std::atomic<int> checked{0};
  expectNoErrors(runEngines(2, [&](Engine& e) {
    const float mine = static_cast<float>(e.identity().rank + 1);
    auto submit = [&](const std::string& name, std::vector<float>& data) {
      Request req;
      req.name = name;
      req.shape = {static_cast<int64_t>(data.size())};
      req.input = data.data();
      req.output = data.data();
      return e.enqueue(std::move(req));
    };
    const auto until = [](const std::function<bool()>& done) {
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
      return done();
    };
    e.barrier().wait(20s);  // the engines have started (a first cycle) and gone idle
    std::this_thread::sleep_for(100ms);
    const uint64_t idle = e.stats().cycles;
    std::vector<std::vector<float>> small(8, std::vector<float>(1024, mine));  // 32 KiB in all
    std::vector<Handle> handles;
    for (size_t i = 0; i < small.size(); ++i) handles.push_back(submit(indexed("held.", static_cast<int>(i)), small[i]));
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(e.stats().cycles, idle) << "allreduces below the bucket started a cycle";
    ++checked;
    ASSERT_TRUE(until([&] { return checked.load() == 2; }));
    ASSERT_TRUE(until([&] { return handles[3].poll(); })) << "a poll did not start the held allreduces";
    for (auto& h : handles) h.wait(20s);
    for (const auto& d : small) ASSERT_EQ(d, std::vector<float>(1024, 3.0f));

    std::vector<std::vector<float>> large(2, std::vector<float>(10240, mine));  // 80 KiB: a bucket
    const uint64_t cycles = e.stats().cycles;
    handles = {submit("bucket.0", large[0]), submit("bucket.1", large[1])};
    EXPECT_TRUE(until([&] { return e.stats().cycles > cycles; })) << "a full bucket started no cycle";
    for (auto& h : handles) h.wait(20s);
    for (const auto& d : large) ASSERT_EQ(d, std::vector<float>(10240, 3.0f));
  }, o));
}

// A training step's gradients (30 small tensors, one every 2 ms as a backward pass makes
// them, then waited for) take a few cycles per step, not one or two per tensor.
uint64_t cyclesOfGradientSteps(const EngineOptions& o) {
  std::atomic<uint64_t> cycles{0};
  expectNoErrors(runEngines(2, [&](Engine& e) {
    const int n = e.identity().size, r = e.identity().rank;
    std::vector<std::vector<double>> grads(30, std::vector<double>(64));
    uint64_t before = 0;
    for (int step = 0; step < 6; ++step) {
      if (step == 1) before = e.stats().cycles;  // step 0 negotiates the names in full
      std::vector<Handle> handles;
      for (size_t t = 0; t < grads.size(); ++t) {
        std::fill(grads[t].begin(), grads[t].end(), (r + 1.0) * static_cast<double>(t + 1));
        Request req;
        req.name = indexed("grad.", static_cast<int>(t));
        req.type = DataType::kFloat64;
        req.shape = {64};
        req.input = req.output = grads[t].data();
        handles.push_back(e.enqueue(std::move(req)));
        std::this_thread::sleep_for(2ms);
      }
      for (size_t t = 0; t < grads.size(); ++t) {
        handles[t].wait(20s);
        ASSERT_EQ(grads[t][0], static_cast<double>(t + 1) * n * (n + 1) / 2);
      }
    }
    if (r == 0) cycles = e.stats().cycles - before;
  }, o));
  return cycles;
}

TEST(Engine, GradientsOfAStepTakeAFewCyclesNotOnePerTensor) {
  EngineOptions unbucketed;
  unbucketed.bucket_bytes = 0;
  // Without buckets nearly every gradient has its own cycle (bound kept loose for the sanitizers).
  EXPECT_GE(cyclesOfGradientSteps(unbucketed), 5u * 15u) << "without buckets";
  EXPECT_LE(cyclesOfGradientSteps(EngineOptions{}), 5u * 6u) << "with buckets (the default)";
}

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

// Submits one tensor whose fields depend on the rank as `vary` says, and returns the error text.
std::vector<std::string> mismatch(const std::function<void(Request&, int)>& vary) {
  std::vector<std::string> messages(3);
  expectNoErrors(runEngines(3, [&](Engine& e) {
    std::vector<float> in(8, 1.0f), out(8);
    std::vector<float> big;
    Request q;
    q.name = "w";
    q.type = DataType::kFloat32;
    q.shape = {8};
    q.input = in.data();
    q.output = out.data();
    q.allocate_output = [&](const std::vector<int64_t>& shape) {
      int64_t n = 1;
      for (auto d : shape) n *= d;
      big.resize(static_cast<size_t>(n));
      return big.data();
    };
    vary(q, e.identity().rank);
    try {
      e.enqueue(q).wait(30s);
    } catch (const MismatchError& err) {
      messages[static_cast<size_t>(e.identity().rank)] = err.what();
    }
    // The engine is still usable after a mismatch.
    float x = 1, y = 0;
    Request ok;
    ok.name = "after";
    ok.type = DataType::kFloat32;
    ok.shape = {1};
    ok.input = &x;
    ok.output = &y;
    e.enqueue(ok).wait(30s);
    EXPECT_EQ(y, 3.0f);
  }));
  return messages;
}

void expectAll(const std::vector<std::string>& messages, const std::string& needle) {
  for (size_t r = 0; r < messages.size(); ++r) {
    EXPECT_NE(messages[r].find(needle), std::string::npos) << "rank " << r << ": '" << messages[r] << "'";
    EXPECT_EQ(messages[r], messages[0]) << "every rank gets the same message";
  }
}

TEST(Engine, EveryMismatchFailsOnEveryRankWithOneMessage) {
  expectAll(mismatch([](Request& q, int r) { if (r == 1) q.shape = {4, 2}; }),
            "Mismatched shapes for tensor 'w' across ranks: ranks 0, 2: [8]; rank 1: [4, 2]");
  expectAll(mismatch([](Request& q, int r) { if (r == 2) q.type = DataType::kFloat16; }),
            "Mismatched data types for tensor 'w' across ranks: ranks 0, 1: float32; rank 2: float16");
  expectAll(mismatch([](Request& q, int r) { if (r == 0) q.op = CollectiveKind::kAllgather; }),
            "Mismatched collective operations for tensor 'w' across ranks: rank 0: allgather; ranks 1, 2: allreduce");
  expectAll(mismatch([](Request& q, int r) { q.reduce.op = r == 1 ? ReduceOp::kMax : ReduceOp::kSum; }),
            "Mismatched reduce operations for tensor 'w'");
  expectAll(mismatch([](Request& q, int r) { q.reduce.postscale = r == 0 ? 2.0 : 1.0; }),
            "Mismatched scale factors for tensor 'w'");
  expectAll(mismatch([](Request& q, int r) {
              q.op = CollectiveKind::kAllgather;
              q.shape = r == 1 ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{r + 1, 8};
            }),
            "Mismatched shapes (beyond the first dimension) for tensor 'w' across ranks: ranks 0, 2: [*, 8]; rank 1: [*, 4]");
  expectAll(mismatch([](Request& q, int r) { q.op = CollectiveKind::kBroadcast; q.root = r == 2 ? 1 : 0; }),
            "Mismatched root ranks for tensor 'w' across ranks: ranks 0, 1: 0; rank 2: 1");
}

TEST(Engine, ANameSubmittedTwiceWhileInFlightFailsOnEveryRank) {
  std::vector<std::string> messages(3);
  expectNoErrors(runEngines(2, [&](Engine& e) {
    const int r = e.identity().rank;
    float a = 1, b = 2;
    Request q;
    q.name = "twice";
    q.type = DataType::kFloat32;
    q.shape = {1};
    q.input = q.output = &a;
    // Rank 1 submits the name twice before its first submission can complete (rank 0 holds it
    // back by submitting late).
    if (r == 0) std::this_thread::sleep_for(200ms);
    Handle first = e.enqueue(q);
    Handle second(nullptr);
    if (r == 1) {
      Request again = q;
      again.input = again.output = &b;
      second = e.enqueue(again);
    }
    try {
      first.wait(30s);
    } catch (const MismatchError& err) {
      messages[static_cast<size_t>(r)] = err.what();
    }
    if (r == 1) {
      try {
        second.wait(30s);
      } catch (const MismatchError& err) {
        messages[2] = err.what();
      }
    }
    // The name is usable again afterwards.
    float c = 5;
    q.input = q.output = &c;
    e.enqueue(q).wait(30s);
    EXPECT_EQ(c, 10.0f);
  }));
  expectAll(messages, "Tensor 'twice' was submitted again while still in flight on rank(s) 1");
}

TEST(Engine, ShutdownFailsLaterRequestsAndANewEngineWorks) {
  rendezvous::TcpStoreServer store("127.0.0.1", 0, kTestSecret);
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> ts;
    for (int r = 0; r < 2; ++r)
      ts.emplace_back([&, r] {
        Identity id;
        id.rank = r;
        id.size = 2;
        id.local_rank = r;
        id.local_size = 2;
        RendezvousOptions rv{"127.0.0.1", store.port(), kTestSecret, indexed("round", round) + "/"};
        Engine e(Communicator::create(id, rv, testOptions()), {});
        float x = 1;
        Request q;
        q.name = "x";
        q.shape = {1};
        q.input = q.output = &x;
        e.enqueue(q).wait(30s);
        EXPECT_EQ(x, 2.0f);
        e.shutdown();
        e.shutdown();  // idempotent
        EXPECT_THROW(e.enqueue(q).wait(5s), ShutdownError);
      });
    for (auto& t : ts) t.join();
  }
}

nlohmann::json readTrace(const std::string& path, bool complete) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string body = text.str();
  if (!complete) body += "\n]";  // what a viewer does with a file cut short
  return nlohmann::json::parse(body);
}

TEST(Engine, TimelineOfEveryRankIsValidChromeTraceJson) {
  const std::string base = "/tmp/hora-timeline-test-" + std::to_string(::getpid()) + ".json";
  EngineOptions o;
  o.timeline = base;
  o.timeline_mark_cycles = true;
  o.timeline_all_ranks = true;
  o.fusion_threshold = 1 << 20;
  std::vector<nlohmann::json> partial(2);
  expectNoErrors(runEngines(2, [&](Engine& e) {
    std::mt19937 rng(3);
    submitAndCheck(e, 3, 20, 1, 1000, rng);
    std::vector<float> big(300000, 1.0f), gathered;
    Request g;
    g.name = "gathered";
    g.op = CollectiveKind::kAllgather;
    g.shape = {static_cast<int64_t>(big.size())};
    g.input = big.data();
    g.allocate_output = [&](const std::vector<int64_t>& shape) {
      gathered.resize(static_cast<size_t>(shape[0]));
      return gathered.data();
    };
    e.enqueue(g).wait(30s);
    // While running, the file lacks only its closing bracket.
    partial[static_cast<size_t>(e.identity().rank)] =
        readTrace(engine::timelinePathFor(base, e.identity().rank, true), false);
  }, o));
  for (int r = 0; r < 2; ++r) {
    const auto path = engine::timelinePathFor(base, r, true);
    EXPECT_FALSE(partial[static_cast<size_t>(r)].empty());
    const auto trace = readTrace(path, true);
    std::set<std::string> names;
    std::map<int, int> depth;  // per lane: begins minus ends
    for (const auto& ev : trace) {
      if (ev.contains("name")) names.insert(ev["name"].get<std::string>());
      EXPECT_EQ(ev["pid"], r);
      if (ev["ph"] == "B") ++depth[ev["tid"].get<int>()];
      if (ev["ph"] == "E") --depth[ev["tid"].get<int>()];
    }
    for (const char* want : {"NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE",
                             "MEMCPY_OUT_FUSION_BUFFER", "NEGOTIATE_ALLGATHER", "ALLGATHER", "CYCLE_START",
                             "rank 0 ready", "rank 1 ready", "thread_name", "process_name"})
      EXPECT_TRUE(names.count(want)) << "rank " << r << " timeline lacks " << want;
    for (const auto& [lane, d] : depth) EXPECT_EQ(d, 0) << "unbalanced begin/end on lane " << lane;
    std::remove(path.c_str());
  }
}

TEST(Engine, TimelineStartsAndStopsAtRunTime) {
  const std::string path = "/tmp/hora-timeline-runtime-" + std::to_string(::getpid()) + ".json";
  expectNoErrors(runEngines(2, [&](Engine& e) {
    std::mt19937 rng(5);
    submitAndCheck(e, 1, 5, 1, 10, rng);  // before: not recorded
    e.startTimeline(path);
    submitAndCheck(e, 1, 5, 1, 10, rng);
    e.stopTimeline();
    submitAndCheck(e, 1, 5, 1, 10, rng);
  }));
  const auto trace = readTrace(path, true);  // closed by stopTimeline: complete JSON
  int allreduces = 0;
  for (const auto& ev : trace)
    if (ev.contains("name") && ev["name"] == "ALLREDUCE") ++allreduces;
  EXPECT_GE(allreduces, 1);
  std::remove(path.c_str());
}

HORA_WORKER_SCENARIO(engine_stall) {
  EngineOptions o = EngineOptions::fromEnvironment();
  Engine e(Communicator::fromEnvironment(), o);
  float x = 1;
  Request q;
  q.name = "late.tensor";
  q.shape = {1};
  q.input = q.output = &x;
  if (e.identity().rank == 1) std::this_thread::sleep_for(2500ms);  // rank 1 falls behind
  e.enqueue(q).wait(30s);
  return x == 3.0f ? 0 : 1;
}

TEST(Engine, StallInspectorNamesTheMissingRanks) {
  ProcessJob job(3, "engine_stall", {{"HORA_STALL_CHECK_TIME_SECONDS", "1"}});
  const auto outcomes = job.wait(60s);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << outcomes[static_cast<size_t>(r)].output;
  EXPECT_NE(outcomes[0].output.find("Stalled tensor 'late.tensor'"), std::string::npos) << outcomes[0].output;
  EXPECT_NE(outcomes[0].output.find("still missing on ranks [1]"), std::string::npos) << outcomes[0].output;
}

HORA_WORKER_SCENARIO(engine_stall_shutdown) {
  Engine e(Communicator::fromEnvironment(), EngineOptions::fromEnvironment());
  float x = 1;
  Request q;
  q.name = "warmup";
  q.shape = {1};
  q.input = q.output = &x;
  try {
    e.enqueue(q).wait(30s);
    q.name = "never.on.rank.1";
    if (e.identity().rank == 1) {
      std::this_thread::sleep_for(4s);  // never submits; its engine keeps cycling
      q.name = "something.else";
    }
    e.enqueue(q).wait(30s);
    return 0;
  } catch (const TimeoutError& err) {
    std::printf("ERROR: %s\n", err.what());
    return 10 + static_cast<int>(ErrorKind::kTimeout);
  }
}

TEST(Engine, StallShutdownFailsEveryRankNamingTensorAndRanks) {
  ProcessJob job(3, "engine_stall_shutdown", {{"HORA_STALL_SHUTDOWN_TIME_SECONDS", "1"}});
  const auto outcomes = job.wait(60s);
  for (int r = 0; r < 3; ++r) {
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kTimeout)) << o.output;
    EXPECT_NE(o.output.find("tensor 'never.on.rank.1' is missing on ranks [1]"), std::string::npos) << o.output;
    // The flight record shows where each rank stands.
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + "'s last operations: #1 allreduce 'warmup' ok"),
              std::string::npos) << o.output;
  }
}

// Allreduce `value` (one float, or a 600k-float tensor that is never fused) named `name`.
Handle submitFilled(Engine& e, const std::string& name, std::vector<float>& buf, float value, ReduceOp op,
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

TEST(Engine, JoinWithUnevenDataAveragesOverTheRanksThatContributed) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    const int my_steps = 3 + 2 * r;  // 3, 5, 7 steps: rank 2 runs out of data last
    const auto contributors = [](int step) {
      std::vector<int> c;
      for (int x = 0; x < 3; ++x)
        if (step < 3 + 2 * x) c.push_back(x);
      return c;
    };
    for (int round = 0; round < 2; ++round) {  // the joined state starts afresh after a join
      for (int step = 0; step < my_steps; ++step) {
        std::vector<std::vector<float>> small(6, std::vector<float>(5));
        std::vector<float> big(600000), sum(3);
        std::vector<Handle> hs;
        const float mine = static_cast<float>((r + 1) * (step + 1));
        for (int t = 0; t < 6; ++t)
          hs.push_back(submitFilled(e, indexed("small.", t), small[static_cast<size_t>(t)], mine, ReduceOp::kAverage));
        hs.push_back(submitFilled(e, "big", big, mine, ReduceOp::kAverage));
        hs.push_back(submitFilled(e, "sum", sum, mine, ReduceOp::kSum));
        for (auto& h : hs) h.wait(30s);
        float total = 0;
        const auto c = contributors(step);
        for (int x : c) total += static_cast<float>((x + 1) * (step + 1));
        const float average = total / static_cast<float>(c.size());
        for (const auto& t : small) ASSERT_EQ(t[0], average) << "round " << round << " step " << step;
        ASSERT_EQ(big[0], average);
        ASSERT_EQ(big.back(), average);
        ASSERT_EQ(sum[2], total);
      }
      int32_t last = -1;
      e.join(&last).wait(30s);
      EXPECT_EQ(last, 2);
    }
  }));
}

TEST(Engine, JoinFailsOtherCollectivesWhileARankHasJoinedThenCompletes) {
  expectNoErrors(runEngines(2, [](Engine& e) {
    int32_t last = -1;
    if (e.identity().rank == 1) {
      e.join(&last).wait(30s);
    } else {
      std::vector<float> x(4, 1.0f);
      Request b;
      b.name = "weights";
      b.op = CollectiveKind::kBroadcast;
      b.shape = {4};
      b.input = b.output = x.data();
      try {
        e.enqueue(b).wait(30s);
        ADD_FAILURE() << "broadcast ran while rank 1 had joined";
      } catch (const MismatchError& err) {
        EXPECT_NE(std::string(err.what()).find("broadcast cannot run while rank(s) 1 have joined"), std::string::npos)
            << err.what();
      }
      e.barrier().wait(30s);  // a barrier goes on with the joined rank
      e.join(&last).wait(30s);
    }
    EXPECT_EQ(last, 0);
  }));
}

TEST(Engine, BarrierReturnsOnlyAfterEveryRankEnteredIt) {
  std::atomic<int64_t> last_entry{0};
  std::vector<int64_t> exits(3);
  const auto now = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  expectNoErrors(runEngines(3, [&](Engine& e) {
    const int r = e.identity().rank;
    for (int round = 0; round < 3; ++round) {  // later rounds come from the response cache
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
      int64_t t = now(), seen = last_entry.load();
      while (t > seen && !last_entry.compare_exchange_weak(seen, t)) {}
      e.barrier().wait(30s);
      exits[static_cast<size_t>(r)] = now();
      EXPECT_GE(exits[static_cast<size_t>(r)], last_entry.load()) << "round " << round;
      e.barrier().wait(30s);  // nobody starts the next round's entry before everyone checked
    }
  }));
}

TEST(Engine, ProcessSetsNegotiateApartAndDoNotBlockEachOther) {
  std::atomic<int> low_done{0};  // ranks 0 and 1 finished their set's steps
  expectNoErrors(runEngines(4, [&](Engine& e) {
    const int r = e.identity().rank;
    const int low = e.addProcessSet({0, 1});
    const int high = e.addProcessSet({2, 3});
    const int odd = e.addProcessSet({1, 3});
    EXPECT_EQ(e.processSetRanks(odd), (std::vector<int>{1, 3}));
    EXPECT_EQ(e.processSetIds(), (std::vector<int>{0, low, high, odd}));
    const int mine = r < 2 ? low : high;

    // Rank 3 holds back a world allreduce; the sets' own collectives go on meanwhile.
    std::vector<float> world(1), local(1), big(600000);
    if (r == 3) {  // until the low set is through (bounded: a failure must not hang the test)
      for (int i = 0; i < 6000 && low_done.load() < 2; ++i) std::this_thread::sleep_for(10ms);
    }
    Handle slow = submitFilled(e, "world", world, static_cast<float>(r + 1), ReduceOp::kSum);
    for (int step = 0; step < 20; ++step) {
      submitFilled(e, "local", local, static_cast<float>(r + step), ReduceOp::kSum, mine).wait(30s);
      const float want = r < 2 ? static_cast<float>(0 + 1 + 2 * step) : static_cast<float>(2 + 3 + 2 * step);
      ASSERT_EQ(local[0], want) << "step " << step;
      submitFilled(e, "big", big, static_cast<float>(r), ReduceOp::kAverage, mine).wait(30s);
      ASSERT_EQ(big[0], r < 2 ? 0.5f : 2.5f);
    }
    if (r < 2) {
      EXPECT_FALSE(slow.poll()) << "the world allreduce finished before rank 3 submitted it";
      ++low_done;
    }
    slow.wait(30s);
    EXPECT_EQ(world[0], 10.0f);

    // Broadcast's root is a rank of the set: root 1 of {1, 3} is global rank 3.
    if (r == 1 || r == 3) {
      std::vector<int32_t> v(3, r);
      Request b;
      b.name = "from.set.root";
      b.op = CollectiveKind::kBroadcast;
      b.type = DataType::kInt32;
      b.shape = {3};
      b.input = b.output = v.data();
      b.root = 1;
      b.process_set = odd;
      e.enqueue(b).wait(30s);
      EXPECT_EQ(v, (std::vector<int32_t>(3, 3)));
    } else {
      std::vector<float> x(1);
      try {
        submitFilled(e, "not.mine", x, 1, ReduceOp::kSum, odd).wait(30s);
        ADD_FAILURE() << "a non-member used process set " << odd;
      } catch (const InvalidArgumentError& err) {
        EXPECT_NE(std::string(err.what()).find("is not a member of process set"), std::string::npos) << err.what();
      }
    }
    e.removeProcessSet(odd);
    EXPECT_THROW(submitFilled(e, "gone", world, 1, ReduceOp::kSum, odd).wait(30s), InvalidArgumentError);
    EXPECT_THROW(e.processSetRanks(odd), InvalidArgumentError);
    // Sets added later get fresh connections; a set of one rank is local.
    const int alone = e.addProcessSet({2});
    if (r == 2) {
      submitFilled(e, "solo", local, 7, ReduceOp::kSum, alone).wait(30s);
      EXPECT_EQ(local[0], 7.0f);
    }
  }));
}

TEST(Engine, ProcessSetArgumentsThatDifferBetweenRanksFailOnEveryRank) {
  const auto errors = runEngines(3, [](Engine& e) {
    e.addProcessSet(e.identity().rank == 1 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
  });
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find("add_process_set.1: the ranks passed different arguments"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  const auto counts = runEngines(2, [](Engine& e) {
    e.addProcessSet(e.identity().rank == 1 ? std::vector<int>{0} : std::vector<int>{0, 1});
  });
  for (size_t r = 0; r < counts.size(); ++r)
    EXPECT_NE(counts[r].find("Mismatched shapes for tensor 'hora.add_process_set.1'"), std::string::npos)
        << "rank " << r << ": " << counts[r];
}

HORA_WORKER_SCENARIO(engine_fused_steps) {
  Engine e(Communicator::fromEnvironment(), EngineOptions::fromEnvironment());
  std::vector<std::vector<float>> ts(50, std::vector<float>(20000, 1.0f));
  std::printf("ready\n");
  std::fflush(stdout);
  try {
    for (int step = 0; step < 100000; ++step) {
      std::vector<Handle> hs;
      for (size_t t = 0; t < ts.size(); ++t) {
        Request q;
        q.name = indexed("g", static_cast<int>(t));
        q.shape = {20000};
        q.input = q.output = ts[t].data();
        q.reduce = {ReduceOp::kAverage};
        hs.push_back(e.enqueue(q));
      }
      for (auto& h : hs) h.wait(30s);
    }
  } catch (const PeerError& err) {
    std::printf("ERROR: %s\n", err.what());
    return 10 + static_cast<int>(ErrorKind::kPeer);
  }
  return 0;
}

TEST(Faults, RankKilledDuringAFusedStepFailsEveryPendingRequestNamingIt) {
  ProcessJob job(3, "engine_fused_steps");
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(job.waitForOutput(r, "ready", 30s));
  std::this_thread::sleep_for(300ms);
  ::kill(job.pid(2), SIGKILL);
  const auto outcomes = job.wait(20s);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 10 + static_cast<int>(ErrorKind::kPeer))
        << outcomes[static_cast<size_t>(r)].output;
    EXPECT_NE(outcomes[static_cast<size_t>(r)].output.find("rank 2"), std::string::npos)
        << outcomes[static_cast<size_t>(r)].output;
  }
}

}  // namespace
}  // namespace hora::testing
