#include "launcher/host_agent.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/deadline.h"
#include "common/knobs.h"
#include "hora/errors.h"
#include "launcher/ps_servers.h"
#include "launcher/thread_budget.h"
#include "launcher/worker_set.h"
#include "rendezvous/tcp_store.h"

namespace hora::launcher {
namespace {

// Reads stdin until the whole plan has arrived: its first field is the length of the rest.
std::string readPlan(const common::Deadline& deadline) {
  std::string got;
  for (;;) {
    if (const auto colon = got.find(':'); colon != std::string::npos) {
      const size_t n = std::stoul(got.substr(0, colon));
      if (got.size() >= colon + 1 + n) return got.substr(0, colon + 1 + n);
    }
    pollfd p{0, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(deadline.remaining().count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) throw TimeoutError("no host plan on stdin in time");
    char buf[65536];
    const ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw PeerError("stdin closed before the host plan was complete");
    got.append(buf, static_cast<size_t>(n));
  }
}

// `command -v`: whether argv[0] names a file this host can execute.
bool executable(const std::string& name, const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0;
  const auto path = env.count("PATH") ? env.at("PATH") : common::processVariable("PATH").value_or("");
  size_t start = 0;
  for (;;) {
    const size_t end = path.find(':', start);
    const std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (::access(((dir.empty() ? "." : dir) + "/" + name).c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

// Best effort: horarun reads the reason after this agent's ssh ended; without it, horarun
// still names the host and the exit code. A store that answers does so in milliseconds; one
// behind a cut link never does, and the agent's exit (the end of the job on this host) must not
// wait long for it.
void report(const HostPlan& plan, const std::string& reason) {
  try {
    const auto& env = plan.ranks.front().env;
    const auto soon = common::Deadline::after(std::chrono::milliseconds(500));
    rendezvous::TcpStore store(env.at("HORA_RENDEZVOUS_ADDR"), std::stoi(env.at("HORA_RENDEZVOUS_PORT")),
                               env.at("HORA_SECRET"), soon);
    store.set(agentReportKey(plan.host), reason, soon);
  } catch (const std::exception&) {
  }
}

}  // namespace

std::string agentReportKey(const std::string& host) { return "agent/" + host + "/failed"; }

int runHostAgent(int plan_timeout_ms) {
  HostPlan plan;
  try {
    plan = decodeHostPlan(readPlan(common::Deadline::after(std::chrono::milliseconds(plan_timeout_ms))));
  } catch (const std::exception& e) {
    std::cerr << "horarun host agent: " << e.what() << "\n";
    return 126;
  }
  if (!executable(plan.command[0], plan.ranks.front().env)) {
    std::cerr << "horarun: command not found on host " << plan.host << ": " << plan.command[0] << "\n";
    return 127;
  }
  // The ranks read /dev/null; the connection to horarun stays with the agent alone, so that only
  // horarun's end can close it.
  const int control = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  if (const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC); null >= 0) {
    ::dup2(null, 0);
    ::close(null);
  }
  installForwardingSignalHandlers();
  WorkerSet workers{std::chrono::milliseconds(plan.grace_ms)};
  std::vector<WorkerSpec> specs(plan.ranks.size());
  std::vector<std::map<std::string, std::string>*> envs;
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].rank = plan.ranks[i].rank;
    specs[i].host = plan.host;
    specs[i].argv = plan.command;
    specs[i].env = plan.ranks[i].env;
    envs.push_back(&specs[i].env);
  }
  addThreadBudget(envs, false);  // Note [thread budget]: this host's cores
  for (const auto& spec : specs) workers.start(spec);
  // stdin's end of file: horarun (or its ssh) is gone, and so must the ranks be.
  const auto launcher_gone = [control]() -> std::string {
    pollfd p{control, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return "";
    char buf[256];
    const ssize_t n = ::read(control, buf, sizeof(buf));
    return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN) ? "horarun closed the connection" : "";
  };
  // A worker of an asynchronous parameter server job may die while the others go on
  // (ps_servers.h); a server's agent runs no workers.
  std::vector<int> ranks;
  const bool runs_server = std::find(plan.command.begin(), plan.command.end(), kPsServerFlag) != plan.command.end();
  for (const auto& r : plan.ranks)
    if (!runs_server) ranks.push_back(r.rank);
  const auto& env = plan.ranks.front().env;
  AsyncWorkerTolerance tolerate(ranks, [&env] {
    return storeSaysAsync(env.at("HORA_RENDEZVOUS_ADDR"), std::stoi(env.at("HORA_RENDEZVOUS_PORT")),
                          env.at("HORA_SECRET"));
  });
  const JobResult result = workers.wait(launcher_gone, tolerate);
  if (result.exit_code != 0) report(plan, result.reason);
  return result.exit_code;
}

}  // namespace hora::launcher
