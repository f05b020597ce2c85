// The engine's negotiation with real ranks: out-of-order submission from several threads, many
// tensors per step over many steps (the response cache), the idle engine on a mixed transport,
// and buckets (Note [buckets]).
#include <gtest/gtest.h>
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "engine_test_util.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

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

// Allreduces below HORA_BUCKET_BYTES that nobody waits for start no cycle; a
// poll (or a wait) asks for them and they all run; a bucket's worth starts a cycle by itself (Note [buckets]).
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

// A cached name that 4 ranks submit one after another, rank r 10 r ms into each step: the
// cycles rank 0 took part in over 5 steps (the first step, negotiated in full, not counted).
uint64_t cyclesOfStaggeredSubmissions(bool board) {
  EngineOptions o;
  o.bucket_bytes = 0;  // every request may start a cycle
  o.submission_board = board;
  std::atomic<uint64_t> cycles{0};
  expectNoErrors(runEngines(4, [&](Engine& e) {
    const int n = e.identity().size, r = e.identity().rank;
    uint64_t before = 0;
    for (int step = 0; step < 6; ++step) {
      if (step == 1) {
        e.barrier().wait(20s);
        before = e.stats().cycles;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));
      std::vector<double> data(16, r + 1.0);
      Request req;
      req.name = "staggered";
      req.type = DataType::kFloat64;
      req.shape = {16};
      req.input = req.output = data.data();
      e.enqueue(std::move(req)).wait(20s);
      ASSERT_EQ(data, std::vector<double>(16, n * (n + 1) / 2.0)) << "step " << step;
    }
    if (r == 0) cycles = e.stats().cycles - before;
  }, o));
  return cycles;
}

// On one host only the rank that completes a cached name starts a cycle (Note [submission
// board]): one cycle per step, where each rank's submission started one without the board.
TEST(Engine, OnOneHostOnlyTheLastSubmissionStartsACycle) {
  EXPECT_LE(cyclesOfStaggeredSubmissions(true), 5u * 1u + 2u) << "with the submission board";
  EXPECT_GE(cyclesOfStaggeredSubmissions(false), 5u * 3u) << "without it";
}

}  // namespace
}  // namespace hora::testing

namespace hora::testing {
namespace {

// The cores this process's threads called `name` may run on, as /proc lists them ("0", "1", ...).
std::vector<std::string> allowedCpusOfThreads(const std::string& name) {
  std::vector<std::string> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string comm_name;
    std::getline(comm, comm_name);
    if (comm_name != name) continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_first_not_of(" \t", 18)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// HORA_THREAD_AFFINITY (horovodrun --thread-affinity): local rank i's engine thread on the i-th core.
TEST(Engine, ThreadAffinityPinsEachLocalRanksEngineThreadToItsCore) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
  EngineOptions options;
  options.thread_affinity = {1, 0};
  std::vector<std::string> seen;
  const auto errors = runEngines(2, [&](Engine& engine) {
    engine.barrier().wait();  // both engine threads run (and pinned themselves before their first cycle)
    if (engine.identity().rank == 0) seen = allowedCpusOfThreads("hora-engine");
    engine.barrier().wait();
  }, options);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "1"}));
}

}  // namespace
}  // namespace hora::testing
