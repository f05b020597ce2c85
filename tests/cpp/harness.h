// Test harness: runs N ranks of a job over loopback, as threads or as processes.
//
// ThreadJob: N threads in this process, each with its own Communicator, one in-process store.
// Fast, and visible to the sanitizers; used for the wide correctness sweeps.
//
// ProcessJob: N copies of this test binary, re-executed with --hora-worker=SCENARIO and the
// HORA_* environment horarun would give them (fork+exec, never fork alone: the parent has
// threads). Used for what threads cannot do: SIGKILL or SIGSTOP one rank. A scenario is a
// function registered with HORA_WORKER_SCENARIO; its exit code and output come back to the test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hora/communicator.h"
#include "hora/engine.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::testing {

inline constexpr const char* kTestSecret = "test-secret-0123456789";

CommunicatorOptions testOptions();

// What hora left in /dev/shm (shared-memory segments are named /hora.<pid>.<n>): the segments
// of the processes `owners`, or of any process when empty (other tests may run beside).
std::vector<std::string> horaSegments(const std::vector<pid_t>& owners = {});

// Runs fn on `size` ranks; fails the current test (naming the rank) if any rank throws.
// `hosts`: each rank's hostname, to pretend the threads run on several hosts (the topology is
// derived from them); empty: one host.
void runThreads(int size, const std::function<void(Communicator&)>& fn,
                const CommunicatorOptions& options = testOptions(), const std::vector<std::string>& hosts = {});

// Like runThreads but returns each rank's exception message ("" when it returned normally).
std::vector<std::string> runThreadsCollectErrors(int size, const std::function<void(Communicator&)>& fn,
                                                 const CommunicatorOptions& options = testOptions(),
                                                 const std::vector<std::string>& hosts = {});

// Runs fn on `size` ranks, each with its own Engine over its own Communicator.
std::vector<std::string> runEngines(int size, const std::function<void(Engine&)>& fn,
                                    const EngineOptions& options = {},
                                    const CommunicatorOptions& comm_options = testOptions(),
                                    const std::vector<std::string>& hosts = {});

using Scenario = std::function<int()>;  // runs in a worker process; returns its exit code
bool registerScenario(const std::string& name, Scenario fn);
#define HORA_WORKER_SCENARIO(name) \
  static int name##_scenario();    \
  static bool name##_registered = ::hora::testing::registerScenario(#name, name##_scenario); \
  static int name##_scenario()

// Called first by main(): runs the scenario named by --hora-worker=NAME and exits, if present.
void runWorkerIfRequested(int argc, char** argv);

struct WorkerOutcome {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr
  std::chrono::steady_clock::time_point ended;
};

class ProcessJob {
 public:
  // `hosts`: each rank's HORA_HOSTNAME, to pretend the ranks run on several hosts; empty: one.
  ProcessJob(int size, const std::string& scenario, std::map<std::string, std::string> env = {},
             const std::vector<std::string>& hosts = {});
  ~ProcessJob();  // SIGKILLs whatever still runs

  pid_t pid(int rank) const { return pids_[static_cast<size_t>(rank)]; }
  // Waits until rank's output contains `text` or the timeout passes; returns whether it did.
  bool waitForOutput(int rank, const std::string& text, std::chrono::milliseconds timeout);
  // Waits for every rank to exit (SIGKILLing all after `timeout`) and returns their outcomes.
  std::vector<WorkerOutcome> wait(std::chrono::milliseconds timeout);
  int storePort() const { return store_->port(); }

 private:
  std::string outputOf(int rank) const;
  std::unique_ptr<rendezvous::TcpStoreServer> store_;
  std::vector<pid_t> pids_;
  std::vector<std::string> output_files_;
};

}  // namespace hora::testing
