#include "launcher/worker_set.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <stdexcept>

extern char** environ;

namespace hora::launcher {
namespace {

volatile std::sig_atomic_t pending_signal = 0;

void onSignal(int sig) { pending_signal = sig; }

std::string describeStatus(int rank, const std::vector<int>& agent_ranks, const std::string& host, int status) {
  std::string who = "rank " + std::to_string(rank) + " on host " + host;
  if (agent_ranks.size() > 1)
    who = "ranks " + std::to_string(agent_ranks.front()) + "-" + std::to_string(agent_ranks.back()) + " on host " + host;
  if (!agent_ranks.empty()) who += " (their ssh and host agent)";
  if (WIFEXITED(status)) return who + " exited with code " + std::to_string(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return who + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
}

int exitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

void installForwardingSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid must return EINTR so the signal is forwarded
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int takePendingSignal() {
  const int sig = pending_signal;
  pending_signal = 0;
  return sig;
}

WorkerSet::~WorkerSet() { stopAll(); }

void WorkerSet::start(const WorkerSpec& spec) {
  // Build argv and envp before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (!spec.env.count(name)) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string not_found = "horarun: " + (spec.name.empty() ? "rank " + std::to_string(spec.rank) : spec.name) +
                                ": cannot execute '" + spec.argv[0] + "': ";

  int in[2] = {-1, -1};
  if (!spec.stdin_data.empty() && ::pipe2(in, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  auto [out, err] = output_.addWorker(spec.rank, !spec.agent_ranks.empty());
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    // If horarun itself is killed, its workers must not live on (an ssh worker's death closes
    // the connection, which stops the remote side too).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    if (in[0] >= 0) ::dup2(in[0], 0);
    ::dup2(out.get(), 1);
    ::dup2(err.get(), 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
    // execvpe searches the PATH of the calling process's environment, not envp's: the rank's
    // (a forwarded virtualenv's, on a remote host) must decide which python runs.
    environ = envp.data();
    ::execvpe(argv[0], argv.data(), envp.data());
    const char* why = std::strerror(errno);
    [[maybe_unused]] auto a = ::write(2, not_found.data(), not_found.size());
    [[maybe_unused]] auto b = ::write(2, why, std::strlen(why));
    [[maybe_unused]] auto c = ::write(2, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so there is no race with signalAll
  if (in[0] >= 0) {
    ::close(in[0]);
    // Written whole before anything runs: the pipe is made large enough (a host agent's plan,
    // every rank's environment, is tens of KiB), so this never blocks.
    if (spec.stdin_data.size() > 65536) ::fcntl(in[1], F_SETPIPE_SZ, static_cast<int>(spec.stdin_data.size()));
    const ssize_t n = ::write(in[1], spec.stdin_data.data(), spec.stdin_data.size());
    if (n != static_cast<ssize_t>(spec.stdin_data.size()))
      throw std::runtime_error("rank " + std::to_string(spec.rank) + " on host " + spec.host + ": cannot pass its " +
                               std::to_string(spec.stdin_data.size()) + " bytes of start-up data (pipe too small)");
  }
  running_[pid] = {spec.rank, spec.host, in[1], spec.agent_ranks};
}

bool WorkerSet::isRunning(int rank) const {
  for (const auto& [pid, w] : running_)
    if (w.rank == rank || std::find(w.agent_ranks.begin(), w.agent_ranks.end(), rank) != w.agent_ranks.end())
      return true;
  return false;
}

void WorkerSet::forget(pid_t pid) {
  auto it = running_.find(pid);
  if (it == running_.end()) return;
  if (it->second.stdin_fd >= 0) ::close(it->second.stdin_fd);
  running_.erase(it);
}

void WorkerSet::signalAll(int sig) {
  for (const auto& [pid, worker] : running_) ::kill(-pid, sig);
}

// A stopped (SIGSTOPped) worker acts on no signal but SIGKILL until it is continued: without the
// SIGCONT it would sit out the whole grace period before the SIGKILL.
void WorkerSet::terminate(pid_t pid) {
  ::kill(-pid, SIGTERM);
  ::kill(-pid, SIGCONT);
}

void WorkerSet::stopAll() {
  if (running_.empty()) return;
  for (const auto& [pid, worker] : running_) terminate(pid);
  const auto give_up = std::chrono::steady_clock::now() + grace_;
  while (!running_.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      ::kill(-pid, SIGKILL);  // whatever the worker left behind in its group
      forget(pid);
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    if (std::chrono::steady_clock::now() >= give_up) {
      signalAll(SIGKILL);
      while (!running_.empty()) {
        const pid_t p = ::waitpid(-1, &status, 0);
        if (p < 0 && errno != EINTR) break;
        if (p > 0) forget(p);
      }
      break;
    }
    output_.pump(std::chrono::milliseconds(10));  // their last words, and the grace period's pace
  }
  while (!running_.empty()) forget(running_.begin()->first);
}

std::vector<WorkerSet::Exit> WorkerSet::reap(std::chrono::milliseconds wait) {
  output_.pump(wait);
  const auto now = std::chrono::steady_clock::now();
  for (auto& [pid, at] : kill_at_)
    if (now >= at) ::kill(-pid, SIGKILL);
  std::vector<Exit> exits;
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;
    auto it = running_.find(pid);
    if (it == running_.end()) continue;
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    exits.push_back({it->second.rank, it->second.agent_ranks, failed,
                     describeStatus(it->second.rank, it->second.agent_ranks, it->second.host, status)});
    forget(pid);
    kill_at_.erase(pid);
    ::kill(-pid, SIGKILL);  // leftovers of its process group
  }
  return exits;
}

void WorkerSet::stop(int rank) {
  for (const auto& [pid, w] : running_) {
    if (w.rank != rank || kill_at_.count(pid)) continue;
    terminate(pid);
    kill_at_[pid] = std::chrono::steady_clock::now() + grace_;
  }
}

JobResult WorkerSet::wait(const std::function<std::string()>& check, const Tolerate& tolerate) {
  JobResult result;
  bool interrupted = false;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  while (!running_.empty()) {
    // Output first: a worker blocked on a full pipe would never exit.
    output_.pump(std::chrono::milliseconds(50));
    if (check && result.failed_rank < 0 && result.exit_code == 0) {
      if (std::string why = check(); !why.empty()) {
        result.exit_code = 1;
        result.reason = why;
        stopAll();
        break;
      }
    }
    if (pending_signal != 0) {
      const int sig = pending_signal;
      pending_signal = 0;
      signalAll(sig);  // forward; the workers' exits end the job below
      if (!interrupted) kill_at = std::chrono::steady_clock::now() + grace_;
      if (result.failed_rank < 0 && !interrupted) {
        interrupted = true;
        result.reason = std::string("horarun received signal ") + strsignal(sig);
        result.exit_code = 128 + sig;
      }
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      signalAll(SIGKILL);  // a worker that ignores the forwarded signal does not hold the job
      kill_at.reset();
    }
    for (const auto& [stopped_pid, at] : kill_at_)  // stop()ped, and still there after grace
      if (std::chrono::steady_clock::now() >= at) ::kill(-stopped_pid, SIGKILL);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
    if (pid < 0) break;
    auto it = running_.find(pid);
    if (it == running_.end()) continue;
    const Running worker = it->second;
    forget(pid);
    ::kill(-pid, SIGKILL);  // leftovers of a finished worker's process group
    const bool stopped = kill_at_.erase(pid) > 0;
    if (!interrupted && result.failed_rank < 0) judgeExit(worker, stopped, status, tolerate, result);
  }
  // What the workers wrote last; a grandchild that keeps a pipe open cannot hold horarun long.
  output_.drain(std::chrono::seconds(1));
  return result;
}

void WorkerSet::judgeExit(const Running& worker, bool stopped, int status, const Tolerate& tolerate,
                          JobResult& result) {
  // A worker stop()ped on purpose ends as it may (an ssh exits 255 on SIGTERM). (After a
  // forwarded signal the workers' own exit codes are its echo, not a failure: not judged.)
  if (stopped || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) return;
  const std::string reason = describeStatus(worker.rank, worker.agent_ranks, worker.host, status);
  if (tolerate) {
    const std::string why = tolerate(worker.agent_ranks.empty() ? std::vector<int>{worker.rank} : worker.agent_ranks);
    if (!why.empty()) {
      result.tolerated.push_back(reason);
      output_.drain(std::chrono::milliseconds(100));  // its last words before the note
      std::cerr << "horarun: " << reason << "; " << why << "\n";
      return;
    }
  }
  result.failed_rank = worker.rank;
  result.exit_code = exitCodeOf(status);
  result.reason = reason;
  if (!worker.agent_ranks.empty()) result.failed_host = worker.host;
  stopAll();
}

}  // namespace hora::launcher
