// The engine's failures with real ranks: every mismatch kind, duplicates, shutdown and
// re-creation, stalls (warning and shutdown) and a rank killed in the middle of a fused step.
#include <gtest/gtest.h>
#include <signal.h>
#include <cstdio>
#include <functional>
#include <thread>

#include "engine_test_util.h"
#include "hora/errors.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

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

// Horovod raises at enqueue, on the rank that made the mistake only: its first submission and
// the other ranks go on as if the second had not been made.
TEST(Engine, ANameSubmittedTwiceWhileInFlightFailsAtOnceOnThatRankOnly) {
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
    if (r == 1) {
      Request again = q;
      again.input = again.output = &b;
      Handle second = e.enqueue(again);
      EXPECT_TRUE(second.poll()) << "the second submission did not fail at enqueue";
      try {
        second.wait(1s);
        ADD_FAILURE() << "the second submission of 'twice' ran";
      } catch (const InvalidArgumentError& err) {
        EXPECT_NE(std::string(err.what()).find("Tensor 'twice' is already in flight on this rank"), std::string::npos)
            << err.what();
      }
      EXPECT_EQ(b, 2.0f);
    }
    first.wait(30s);
    EXPECT_EQ(a, 2.0f);
    // The name is usable again once its submission completed.
    float c = 5;
    q.input = q.output = &c;
    e.enqueue(q).wait(30s);
    EXPECT_EQ(c, 10.0f);
  }));
}

// A rank that shuts down tells the others who left and why (Note [departures]).
TEST(Engine, ARankThatShutsDownIsNamedWithItsReasonOnTheOthers) {
  std::vector<std::string> seen(3);
  expectNoErrors(runEngines(3, [&](Engine& e) {
    const int r = e.identity().rank;
    std::vector<float> x(4);
    submitFilled(e, "warm", x, 1, ReduceOp::kSum).wait(30s);
    if (r == 1) {
      e.shutdown("is exiting: its script raised ValueError: bad shard 3");
    } else {
      try {
        submitFilled(e, "never.on.rank.1", x, 1, ReduceOp::kSum).wait(30s);
        ADD_FAILURE() << "the allreduce completed without rank 1";
      } catch (const ShutdownError& err) {
        seen[static_cast<size_t>(r)] = err.what();
      }
    }
    try {  // later requests fail with the same cause, on every rank
      submitFilled(e, "later", x, 1, ReduceOp::kSum).wait(5s);
      ADD_FAILURE() << "a request ran after rank 1 left";
    } catch (const ShutdownError& err) {
      if (r != 1) {
        EXPECT_EQ(std::string(err.what()), seen[static_cast<size_t>(r)]);
      }
    }
  }));
  for (int r : {0, 2})
    EXPECT_EQ(seen[static_cast<size_t>(r)],
              "hora has shut down: rank 1 is exiting: its script raised ValueError: bad shard 3");
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
