// WorkerSet: the local worker processes of a job, started with fork/exec and watched until the
// job ends.
//
// Each worker runs in its own process group, so stopping a worker also stops what it started.
// Its stdout and stderr reach horarun's line by line, prefixed with its rank (OutputForwarder).
// wait() returns when every worker exited successfully, or when the first one failed; in that
// case the others get SIGTERM, then SIGKILL after `grace`. Signals that horarun receives
// (SIGINT, SIGTERM, SIGHUP) are forwarded to every worker, and SIGKILL follows after `grace`; the
// job then exits with 128 + that signal. Single-threaded: call from main() only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/output_forwarder.h"

namespace hora::launcher {

struct WorkerSpec {
  int rank = 0;
  std::string host;                        // where it runs, for messages
  std::string name;                        // how messages name it; empty: "rank <rank>"
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (and overriding) horarun's environment
  // Written to the worker's stdin, which then stays open until the worker ends (an ssh worker
  // reads the job secret from it and stops when it closes). Empty: stdin is horarun's.
  std::string stdin_data;
  // Non-empty: this process is a host agent (host_agent.h) running these ranks (`rank` is the
  // first); their output arrives already prefixed, and isRunning(r) holds while it runs.
  std::vector<int> agent_ranks;
};

struct JobResult {
  int exit_code = 0;   // 0, the failed worker's exit code, or 128 + its signal
  int failed_rank = -1;  // a host agent's first rank when the agent failed
  std::string failed_host;  // set when a host agent failed: its report has the failed rank
  std::string reason;  // "rank 2 on host a exited with code 3", "rank 1 on host a was killed by signal 9 (Killed)"
  std::vector<std::string> tolerated;  // failures the job went on without (wait's `tolerate`)
};

class WorkerSet {
 public:
  WorkerSet(std::chrono::milliseconds grace, std::string output_dir = {}, bool timestamp_output = false)
      : grace_(grace), output_(std::move(output_dir), timestamp_output) {}
  ~WorkerSet();  // kills whatever still runs

  // Throws std::runtime_error when fork fails. A command that cannot be executed makes that
  // worker exit with code 127 and a message naming the command.
  void start(const WorkerSpec& spec);
  // `check` runs about every 50 ms; a non-empty answer fails the job with that reason (exit
  // code 1), as a failed worker would. `tolerate` is asked about a failed worker (its rank, or
  // a host agent's ranks) before the job is failed: a non-empty answer, printed after the
  // failure's reason, lets the others go on (an asynchronous parameter server job's workers).
  using Tolerate = std::function<std::string(const std::vector<int>& ranks)>;
  JobResult wait(const std::function<std::string()>& check = {}, const Tolerate& tolerate = {});
  bool isRunning(int rank) const;

  // For an elastic job, whose workers come and go without ending it (elastic_driver.h): `rank`
  // is then the driver's number for a worker (or a host agent's first), not a rank.
  struct Exit {
    int rank;
    std::vector<int> agent_ranks;  // a host agent's: every worker it ran has ended
    bool failed;                   // non-zero or a signal
    std::string why;               // "rank 2 on host a exited with code 3"
  };
  // Forwards output for up to `wait`, then returns the workers that exited meanwhile; the
  // others go on. Workers stopped with stop() get SIGKILL once `grace` has passed.
  std::vector<Exit> reap(std::chrono::milliseconds wait);
  // SIGTERM to the worker (or the host agent) `rank`, SIGKILL after `grace`; its exit, whatever
  // its code, does not fail the job in wait().
  void stop(int rank);
  // Stops every worker (TERM, then KILL after `grace`) and waits for them.
  void stopAll();
  // The worker's output prefix from now on: "[label]" instead of "[rank]".
  void relabel(int rank, const std::string& label) { output_.relabel(rank, label); }
  void drainOutput(std::chrono::milliseconds limit) { output_.drain(limit); }
  // Forwards what the workers wrote so far, without waiting: before a relabel, so that lines of
  // the previous generation keep its labels.
  void forwardWrittenOutput() { output_.pump(std::chrono::milliseconds(0)); }

 private:
  void signalAll(int sig);
  void terminate(pid_t pid);  // SIGTERM, and SIGCONT so that a stopped worker acts on it

  std::chrono::milliseconds grace_;
  struct Running {
    int rank;
    std::string host;
    int stdin_fd = -1;  // our end of its stdin pipe, or -1
    std::vector<int> agent_ranks;
  };
  void forget(pid_t pid);
  // wait()'s verdict on a worker that exited with `status` (not after a forwarded signal, and
  // while no failure is recorded): a failure fills `result` and stops the others, unless the
  // worker was stop()ped or `tolerate` lets it go.
  void judgeExit(const Running& worker, bool stopped, int status, const Tolerate& tolerate, JobResult& result);

  std::map<pid_t, Running> running_;
  std::map<pid_t, std::chrono::steady_clock::time_point> kill_at_;  // stop(): SIGKILL then
  OutputForwarder output_;
};

// Installs handlers so that SIGINT/SIGTERM/SIGHUP interrupt WorkerSet::wait(), which forwards them.
void installForwardingSignalHandlers();
// The signal received since the last call (0: none), for a loop other than WorkerSet::wait.
int takePendingSignal();

}  // namespace hora::launcher
