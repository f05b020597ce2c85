// Failure tests with ranks as processes: SIGKILL or SIGSTOP one rank in the middle of a stream
// of allreduces; every other rank must fail promptly with an error that names it.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "collectives/flight_recorder.h"
#include "harness.h"
#include "hora/errors.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

// Exit codes of the scenario: 0 = finished, 10 + ErrorKind = failed with that kind.
int exitCodeFor(const Error& e) { return 10 + static_cast<int>(e.kind()); }

HORA_WORKER_SCENARIO(allreduce_stream) {
  try {
    auto comm = Communicator::fromEnvironment();
    std::vector<float> data(1 << 20, 1.0f);
    comm->allreduce(data.data(), data.data(), data.size(), DataType::kFloat32);
    std::printf("ready\n");
    std::fflush(stdout);
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < until)
      comm->allreduce(data.data(), data.data(), data.size(), DataType::kFloat32, {ReduceOp::kMax});
    return 0;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    return exitCodeFor(e);
  }
}

void expectNamed(const WorkerOutcome& o, int rank, const std::string& victim) {
  EXPECT_NE(o.output.find(victim), std::string::npos)
      << "rank " << rank << " output does not name " << victim << ":\n" << o.output;
}

// Every fault test runs over shared memory (the ranks are processes of one host), over TCP, and
// on two pretend hosts (ranks 0 and 2 on one, 1 and 3 on the other), so the victim is a
// shared-memory peer of some ranks and a TCP peer of the others: "hybrid" runs the flat ring
// across them, "hierarchical" the hierarchical allreduce (collectives of sub-communicators).
class Faults : public ::testing::TestWithParam<std::string> {
 protected:
  bool twoHosts() const { return GetParam() == "hybrid" || GetParam() == "hierarchical"; }
  std::map<std::string, std::string> env(std::map<std::string, std::string> more = {}) const {
    more["HORA_TRANSPORT"] = twoHosts() ? "auto" : GetParam();
    more["HORA_HIERARCHICAL_ALLREDUCE"] = GetParam() == "hierarchical" ? "1" : "0";
    return more;
  }
  std::vector<std::string> hosts() const {
    if (!twoHosts()) return {};
    return {"host0", "host1", "host0", "host1"};
  }
};

TEST_P(Faults, SigkillOneRankEveryOtherRankNamesItWithinTwoSeconds) {
  constexpr int kRanks = 4, kVictim = 2;
  ProcessJob job(kRanks, "allreduce_stream", env(), hosts());
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(job.waitForOutput(r, "ready", 30s)) << "rank " << r;
  std::this_thread::sleep_for(100ms);
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(job.pid(kVictim), SIGKILL);
  const auto outcomes = job.wait(20s);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << "rank " << r << ":\n" << o.output;
    expectNamed(o, r, "rank 2");
    EXPECT_LT(o.ended - killed_at, 2s) << "rank " << r << " took too long to fail";
    if (r == 0) std::printf("rank 0 reported:\n%s\n", o.output.c_str());
  }
  // The segments were unlinked once mapped: a killed job leaves nothing behind.
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) pids.push_back(job.pid(r));
  EXPECT_TRUE(horaSegments(pids).empty()) << "left in /dev/shm: " << horaSegments(pids).front();
}

// Note [heartbeat]: a stopped rank keeps its sockets open, so only its silence shows. The
// collective timeout stays at its default (30 s): the ranks must fail through the heartbeat.
TEST_P(Faults, SigstopOneRankTheHeartbeatNamesItWithinSeconds) {
  constexpr int kRanks = 4, kVictim = 1;
  ProcessJob job(kRanks, "allreduce_stream", env({{"HORA_HEARTBEAT_TIMEOUT_SECONDS", "1"}}), hosts());
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(job.waitForOutput(r, "ready", 30s)) << "rank " << r;
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(job.pid(kVictim), SIGSTOP);
  // Wait for the others only; the stopped rank is killed below.
  const auto until = stopped_at + 10s;
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    ASSERT_TRUE(job.waitForOutput(r, "ERROR", std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())))
        << "rank " << r << " did not fail";
  }
  // 1 s of silence, a sixth of it until the next look, the failure reports' grace (500 ms).
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, 1s + 1500ms);
  ::kill(job.pid(kVictim), SIGKILL);
  const auto outcomes = job.wait(10s);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << "rank " << r << ":\n" << o.output;
    EXPECT_NE(o.output.find("rank 1 ("), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("sent no heartbeat for"), std::string::npos) << o.output;
    // Where this rank was, not what the socket the heartbeat shut seemed to say.
    EXPECT_NE(o.output.find("(here: this rank was in allreduce #"), std::string::npos) << o.output;
    EXPECT_EQ(o.output.find("closed the connection"), std::string::npos) << o.output;
    // The flight recorder: where this rank and the reporting ranks were.
    EXPECT_NE(o.output.find("'s last collectives: #"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("allreduce 4194304 B running for"), std::string::npos) << o.output;
    if (r == 0) std::printf("rank 0 reported:\n%s\n", o.output.c_str());
  }
}

// The ranks compute for a while between two collectives (no collective in flight) while one is
// stopped: the next collective fails at once, naming the stopped rank.
HORA_WORKER_SCENARIO(idle_then_allreduce) {
  auto comm = Communicator::fromEnvironment();
  int x = 1, y = 0;
  comm->allreduce(&x, &y, 1, DataType::kInt32);
  std::printf("ready\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(3s);  // "computing"; rank 1 is stopped meanwhile
  const auto began = std::chrono::steady_clock::now();
  try {
    comm->allreduce(&x, &y, 1, DataType::kInt32);
    std::printf("finished: %d\n", y);
    return 0;
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    std::printf("ERROR after %lld ms: %s\n", static_cast<long long>(ms.count()), e.what());
    return exitCodeFor(e);
  }
}

TEST_P(Faults, SigstopBetweenCollectivesTheNextOneFailsAtOnce) {
  constexpr int kRanks = 4, kVictim = 1;
  ProcessJob job(kRanks, "idle_then_allreduce", env({{"HORA_HEARTBEAT_TIMEOUT_SECONDS", "1"}}), hosts());
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(job.waitForOutput(r, "ready", 30s)) << "rank " << r;
  ::kill(job.pid(kVictim), SIGSTOP);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    ASSERT_TRUE(job.waitForOutput(r, "ERROR", 10s)) << "rank " << r << " did not fail";
  }
  ::kill(job.pid(kVictim), SIGKILL);
  const auto outcomes = job.wait(10s);
  for (int r = 0; r < kRanks; ++r) {
    if (r == kVictim) continue;
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << "rank " << r << ":\n" << o.output;
    EXPECT_NE(o.output.find("sent no heartbeat for"), std::string::npos) << o.output;
    EXPECT_NE(o.output.find("rank 1 ("), std::string::npos) << o.output;
    // Declared during the sleep: the collective fails without waiting (the reports' grace aside).
    long long ms = -1;
    const size_t at = o.output.find("ERROR after ");
    if (at != std::string::npos) ms = std::atoll(o.output.c_str() + at + 12);
    EXPECT_GE(ms, 0) << o.output;
    EXPECT_LT(ms, 1000) << o.output;
  }
}

// A rank that computes three heartbeat timeouts long before its next collective is slow, not
// dead: its heartbeat thread keeps beating, so the others wait for it and the sums are right.
HORA_WORKER_SCENARIO(one_slow_rank) {
  auto comm = Communicator::fromEnvironment();
  for (int i = 0; i < 2; ++i) {
    if (comm->rank() == 1) std::this_thread::sleep_for(3s);
    int x = comm->rank(), y = 0;
    comm->allreduce(&x, &y, 1, DataType::kInt32);
    if (y != 0 + 1 + 2 + 3) {
      std::printf("wrong sum %d\n", y);
      return 1;
    }
  }
  return 0;
}

TEST_P(Faults, ASlowRankIsNotDeclaredDead) {
  ProcessJob job(4, "one_slow_rank", env({{"HORA_HEARTBEAT_TIMEOUT_SECONDS", "1"}}), hosts());
  const auto outcomes = job.wait(30s);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << "rank " << r << ":\n" << outcomes[static_cast<size_t>(r)].output;
}

INSTANTIATE_TEST_SUITE_P(Transports, Faults, ::testing::Values("shm", "tcp", "hybrid", "hierarchical"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

HORA_WORKER_SCENARIO(two_communicators) {
  auto a = Communicator::fromEnvironment();
  auto b = Communicator::fromEnvironment();
  for (int i = 0; i < 50; ++i) {
    int x = a->rank() + i, y = 0;
    a->allreduce(&x, &y, 1, DataType::kInt32);
    int u = 1, v = 0;
    b->allreduce(&u, &v, 1, DataType::kInt32);
    if (y != 0 + 1 + 2 + 3 * i || v != 3) {
      std::printf("wrong: %d %d at %d\n", y, v, i);
      return 1;
    }
  }
  return 0;
}

TEST(Processes, TwoCommunicatorsInOneJobKeepApart) {
  ProcessJob job(3, "two_communicators");
  const auto outcomes = job.wait(60s);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << "rank " << r << ":\n"
                                                              << outcomes[static_cast<size_t>(r)].output;
}

TEST(FlightRecorder, KeepsTheLastCollectivesInOrder) {
  collectives::FlightRecorder f;
  EXPECT_EQ(f.describe(), "none");
  for (uint32_t s = 1; s <= 10; ++s) {
    f.start(s, s % 2 ? "allreduce" : "broadcast", s * 100);
    if (s < 10) f.finish(s);
  }
  const std::string d = f.describe();
  EXPECT_EQ(d.find("#1 "), std::string::npos) << d;  // only the last 8 are kept
  EXPECT_EQ(d.rfind("#3 allreduce 300 B done in ", 0), 0u) << d;
  EXPECT_NE(d.find("#10 broadcast 1000 B running for"), std::string::npos) << d;
}

}  // namespace
}  // namespace hora::testing
