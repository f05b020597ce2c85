#include "launcher/worker_start.h"

#include <filesystem>

#include "launcher/forwarded_env.h"
#include "launcher/host_plan.h"
#include "launcher/thread_budget.h"

extern char** environ;

namespace hora::launcher {

WorkerStart workerStart(const JobFlags& f) {
  WorkerStart start;
  start.command = f.command;
  start.grace_ms = static_cast<int>(f.grace_seconds * 1000);
  start.ssh = f.ssh;
  start.ssh.connect_timeout = std::chrono::seconds(static_cast<int64_t>(f.start_timeout));
  start.cwd = std::filesystem::current_path().string();
  start.horarun = std::filesystem::canonical("/proc/self/exe").string();
  start.forwarded = forwardedEnvironment(environ);
  start.verbose = f.verbose;
  start.is_local = [known = std::make_shared<std::map<std::string, bool>>()](const std::string& host) {
    auto it = known->find(host);
    if (it == known->end()) it = known->emplace(host, isLocalHost(host)).first;
    return it->second;
  };
  return start;
}

Env rankVariables(const Placement& p) {
  Env env;
  const std::pair<const char*, int> numbers[] = {{"RANK", p.rank},         {"SIZE", p.size},
                                                 {"LOCAL_RANK", p.local_rank}, {"LOCAL_SIZE", p.local_size},
                                                 {"CROSS_RANK", p.cross_rank}, {"CROSS_SIZE", p.cross_size}};
  for (const auto& [name, value] : numbers) {
    env[std::string("HORA_") + name] = std::to_string(value);
    env[std::string("HOROVOD_") + name] = std::to_string(value);
  }
  env["HORA_HOSTNAME"] = env["HOROVOD_HOSTNAME"] = p.host;
  return env;
}

Env storeVariables(const std::string& address, int port, const std::string& secret) {
  return {{"HORA_RENDEZVOUS_ADDR", address}, {"HORA_RENDEZVOUS_PORT", std::to_string(port)}, {"HORA_SECRET", secret}};
}

std::vector<WorkerSpec> workerSpecs(const std::vector<Worker>& workers, const WorkerStart& start) {
  std::vector<WorkerSpec> specs;
  // One host agent per remote host and command: the ranks of a host share one, and so do the
  // parameter servers there (whose command differs).
  using AgentKey = std::pair<std::string, std::vector<std::string>>;
  std::map<AgentKey, HostPlan> remote;
  std::vector<AgentKey> remote_order;
  for (const auto& w : workers) {
    const std::vector<std::string>& command = w.command.empty() ? start.command : w.command;
    if (start.is_local(w.host)) {
      WorkerSpec spec;
      spec.rank = w.number;
      spec.host = w.host;
      spec.name = w.name;
      spec.argv = command;
      spec.env = w.env;
      specs.push_back(std::move(spec));
      continue;
    }
    AgentKey key{w.host, command};
    auto [plan, first] = remote.try_emplace(key);
    if (first) remote_order.push_back(key);
    plan->second.host = w.host;
    plan->second.grace_ms = start.grace_ms;
    plan->second.command = command;
    Env env = w.env;
    for (const auto& [k, v] : start.forwarded) env.emplace(k, v);
    plan->second.ranks.push_back({w.number, std::move(env)});
  }
  std::vector<Env*> local;  // the remote ones get theirs from their host agent, which knows its cores
  for (auto& spec : specs) local.push_back(&spec.env);
  addThreadBudget(local, start.verbose);
  for (const auto& key : remote_order) {
    const HostPlan& plan = remote.at(key);
    WorkerSpec spec;
    spec.rank = plan.ranks.front().rank;
    spec.host = key.first;
    for (const auto& r : plan.ranks) spec.agent_ranks.push_back(r.rank);
    spec.argv = sshHostAgentArgv(key.first, start.ssh, start.cwd, start.horarun);
    spec.stdin_data = encodeHostPlan(plan);
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace hora::launcher
