// The C++ elastic loop (include/hora/elastic.h) in real worker processes, with this test playing
// horarun's driver through the store: the workers re-form generation after generation in the same
// process (planned re-formations, as for a host change, then a SIGKILLed worker), each
// generation's engine computes correct sums, nothing of an old generation is left behind (file
// descriptors, threads, shared-memory segments), and a worker the driver removes exits with 0.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "bootstrap/job/elastic_join.h"
#include "harness.h"
#include "hora/c_api.h"
#include "hora/hora.h"
#include "rendezvous/tcp_store.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

// The generation whose members step until a peer is lost (the test kills one), and the last one.
constexpr int kKillGeneration = 3;
constexpr int kLastGeneration = 5;
constexpr int kStepsPerGeneration = 3;

size_t entriesOf(const char* dir) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++n;
  }
  return n;
}

// Mappings of shared memory (hora unlinks its segments once every rank has mapped them, so the
// mappings, not /dev/shm, show what a generation left behind).
size_t sharedMappings() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("/dev/shm/") != std::string::npos;
  return n;
}

// One training step: every rank contributes rank + 1; returns 0 when the sum is right.
int step(Engine& engine) {
  const Identity& me = engine.identity();
  float x = static_cast<float>(me.rank + 1), sum = 0;
  Request q;
  q.name = "step";
  q.type = DataType::kFloat32;
  q.shape = {1};
  q.input = &x;
  q.output = &sum;
  engine.enqueue(q).wait(30s);
  const float expected = static_cast<float>(me.size * (me.size + 1) / 2);
  if (sum == expected) return 0;
  std::printf("WRONG: generation %d rank %d got %f, expected %f\n", me.generation, me.rank, sum, expected);
  return 3;
}

// An elastic worker as a C++ program writes it: join, train, and on a lost peer (or a planned
// re-formation) destroy the Engine with its Communicator and join the next generation.
HORA_WORKER_SCENARIO(elastic_worker) {
  const std::string id = std::string("h:") + std::getenv("HORA_RANK");
  ::setenv("HORA_ELASTIC_WORKER_ID", id.c_str(), 1);
  for (int join = 0; join <= kLastGeneration; ++join) {
    // What this process holds between generations: the same at every join once the first
    // generation has initialised what lives for the whole process.
    std::printf("before join %d: fds %zu threads %zu segments %zu mappings %zu\n", join, entriesOf("/proc/self/fd"),
                entriesOf("/proc/self/task"), horaSegments({::getpid()}).size(), sharedMappings());
    std::fflush(stdout);
    std::unique_ptr<Engine> engine;
    try {
      engine = std::make_unique<Engine>(Communicator::fromEnvironment(), EngineOptions::fromEnvironment());
    } catch (const WorkerRemovedError& e) {
      std::printf("removed: %s\n", e.what());
      return 0;
    }
    const int generation = engine->identity().generation;
    try {
      for (int i = 0; i < 100000; ++i) {
        if (const int wrong = step(*engine)) return wrong;
        if (i + 1 < kStepsPerGeneration) continue;
        if (i + 1 == kStepsPerGeneration) {
          std::printf("generation %d rank %d size %d: steps ok, mappings %zu\n", generation, engine->identity().rank,
                      engine->identity().size, sharedMappings());
          std::fflush(stdout);
        }
        if (generation == kLastGeneration) return 0;
        if (generation != kKillGeneration) break;  // a planned re-formation (a host change)
        std::this_thread::sleep_for(2ms);
      }
      if (generation == kKillGeneration) return 4;  // nobody was killed
    } catch (const Error& e) {
      const auto lost = std::chrono::steady_clock::now();
      std::printf("generation %d lost a peer (error kind %d): %s\n", generation, static_cast<int>(e.kind()), e.what());
      engine.reset();
      std::printf("reset after the lost peer took %lld ms\n",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - lost).count()));
      std::fflush(stdout);
      continue;
    }
    engine->shutdown("re-forming for the next generation");
  }
  return 5;  // more joins than generations
}

// Plays horarun's driver: answers the next join of each worker.
class TestDriver {
 public:
  explicit TestDriver(int port) : store_("127.0.0.1", port, kTestSecret, common::Deadline::after(10s)) {}

  // Answers the next join of `worker` (one it has not answered yet) with `answer`.
  void answer(const std::string& worker, const std::string& answer) {
    const auto d = common::Deadline::after(60s);
    std::string nonce;
    while (true) {
      nonce = store_.get(bootstrap::elasticJoinKey(worker), d);
      if (nonce != answered_[worker]) break;
      if (d.expired()) throw TimeoutError("worker " + worker + " did not join again");
      std::this_thread::sleep_for(5ms);
    }
    answered_[worker] = nonce;
    store_.set(bootstrap::elasticAnswerKey(worker, nonce), answer, d);
  }

  // Places `members` in this order as the ranks of `generation`.
  void form(int generation, const std::vector<std::string>& members) {
    for (size_t rank = 0; rank < members.size(); ++rank)
      answer(members[rank], std::to_string(generation) + " " + std::to_string(rank) + " " +
                                std::to_string(members.size()));
  }

 private:
  rendezvous::TcpStore store_;
  std::map<std::string, std::string> answered_;
};

struct Holdings {
  int fds, threads, segments, mappings;
  bool operator==(const Holdings&) const = default;
};

std::vector<Holdings> holdingsBeforeEachJoin(const std::string& output) {
  static const std::regex line(R"(before join (\d+): fds (\d+) threads (\d+) segments (\d+) mappings (\d+))");
  std::vector<Holdings> out;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
    out.push_back({std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]), std::stoi((*it)[5])});
  return out;
}

TEST(ElasticFaults, WorkersReformInTheSameProcessAfterPlannedChangesAndAKillWithoutLeaking) {
  ProcessJob job(3, "elastic_worker", {{"HORA_ELASTIC", "1"}, {"HORA_ELASTIC_TIMEOUT_SECONDS", "60"}});
  TestDriver driver(job.storePort());
  // Generations 0-2: all three, in a different rank order each time; each re-forms by plan.
  driver.form(0, {"h:0", "h:1", "h:2"});
  driver.form(1, {"h:2", "h:0", "h:1"});
  driver.form(2, {"h:1", "h:2", "h:0"});
  driver.form(kKillGeneration, {"h:0", "h:1", "h:2"});
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(job.waitForOutput(r, "generation " + std::to_string(kKillGeneration), 60s)) << "worker h:" << r;
  ::kill(job.pid(2), SIGKILL);
  driver.form(4, {"h:0", "h:1"});
  driver.answer("h:1", "removed its host left the job");
  driver.form(kLastGeneration, {"h:0"});
  const auto outcomes = job.wait(60s);

  EXPECT_EQ(outcomes[2].exit_code, 128 + SIGKILL) << outcomes[2].output;
  for (int r = 0; r < 2; ++r) {
    const std::string& out = outcomes[static_cast<size_t>(r)].output;
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << out;
    for (int g = 0; g <= kKillGeneration; ++g)
      EXPECT_NE(out.find("generation " + std::to_string(g) + " rank"), std::string::npos) << "generation " << g << out;
    EXPECT_NE(out.find("generation 4 rank " + std::to_string(r) + " size 2: steps ok"), std::string::npos) << out;
    // The mappings are seen while a generation runs (all ranks on one host share memory), so
    // their absence between generations means they were released.
    static const std::regex running(R"(generation 0 rank \d+ size 3: steps ok, mappings (\d+))");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, running)) << out;
    EXPECT_GT(std::stoi(m[1]), 0) << out;
    // Pending work fails with the typed error of a dead peer, naming it (directly, or in the
    // report of the rank that saw it first, when the other survivor left that ring first).
    const auto lost = out.find("generation 3 lost a peer (error kind " +
                               std::to_string(static_cast<int>(ErrorKind::kPeer)) + "): rank " + std::to_string(r));
    ASSERT_NE(lost, std::string::npos) << out;
    EXPECT_NE(out.find("rank 2 (shared memory; ", lost), std::string::npos) << out;
    const auto reset = out.find("reset after the lost peer took");
    if (reset != std::string::npos) std::printf("worker h:%d: %s", r, out.substr(reset, out.find('\n', reset) - reset + 1).c_str());
    // The first generation initialises what the process keeps; every later join finds the
    // process holding exactly that again, after planned re-formations and after the lost peer.
    const std::vector<Holdings> held = holdingsBeforeEachJoin(out);
    ASSERT_EQ(held.size(), static_cast<size_t>(kLastGeneration + 1)) << out;
    for (size_t join = 2; join < held.size(); ++join) {
      EXPECT_EQ(held[join].fds, held[1].fds) << "open file descriptors before join " << join << "\n" << out;
      EXPECT_EQ(held[join].threads, held[1].threads) << "threads before join " << join << "\n" << out;
      EXPECT_EQ(held[join].segments, 0) << "shared-memory segments before join " << join << "\n" << out;
      EXPECT_EQ(held[join].mappings, 0) << "shared-memory mappings before join " << join << "\n" << out;
    }
  }
  EXPECT_NE(outcomes[0].output.find("generation 5 rank 0 size 1: steps ok"), std::string::npos) << outcomes[0].output;
  EXPECT_NE(outcomes[1].output.find("removed: elastic worker h:1 was removed from the job by horarun: its host left"),
            std::string::npos) << outcomes[1].output;
}

// A C program's elastic worker: joins twice through the C ABI; exits with 20 + the second status.
HORA_WORKER_SCENARIO(elastic_c_worker) {
  ::setenv("HORA_ELASTIC_WORKER_ID", "c:0", 1);
  hora_comm* comm = nullptr;
  if (hora_comm_init(&comm) != HORA_OK) {
    std::printf("first join failed: %s\n", hora_last_error());
    return 1;
  }
  double x = 2, y = 0;
  const hora_status sum = hora_allreduce(comm, &x, &y, 1, HORA_FLOAT64, HORA_SUM, 1.0, 1.0);
  std::printf("first join: size %d, sum %g (status %d)\n", hora_comm_size(comm), y, static_cast<int>(sum));
  hora_comm_destroy(comm);
  const hora_status second = hora_comm_init(&comm);
  std::printf("second join: status %d: %s\n", static_cast<int>(second), hora_last_error());
  return 20 + static_cast<int>(second);
}

TEST(ElasticFaults, TheCAbiPlacesAWorkerAndReportsItsRemovalAsHoraErrRemoved) {
  ProcessJob job(1, "elastic_c_worker", {{"HORA_ELASTIC", "1"}, {"HORA_ELASTIC_TIMEOUT_SECONDS", "60"}});
  TestDriver driver(job.storePort());
  driver.form(0, {"c:0"});
  driver.answer("c:0", "removed its host was blacklisted");
  const auto outcomes = job.wait(60s);
  EXPECT_EQ(outcomes[0].exit_code, 20 + HORA_ERR_REMOVED) << outcomes[0].output;
  EXPECT_NE(outcomes[0].output.find("first join: size 1, sum 2 (status 0)"), std::string::npos) << outcomes[0].output;
  EXPECT_NE(outcomes[0].output.find("c:0 was removed from the job by horarun: its host was blacklisted"),
            std::string::npos) << outcomes[0].output;
}

}  // namespace
}  // namespace hora::testing
