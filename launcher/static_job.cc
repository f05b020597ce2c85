#include "launcher/static_job.h"

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "common/crypto.h"
#include "common/deadline.h"
#include "launcher/host_agent.h"
#include "launcher/ps_servers.h"
#include "launcher/worker_set.h"
#include "launcher/worker_start.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::launcher {
namespace {

// The job's workers: each rank with its variables and the store's beside the job's `env`.
std::vector<Worker> rankWorkers(const JobPlan& plan, const Env& env, int store_port, const std::string& secret) {
  std::vector<Worker> workers;
  for (const auto& p : plan.placements) {
    Env rank_env = env;
    for (auto& [k, v] : rankVariables(p)) rank_env[k] = std::move(v);
    for (auto& [k, v] : storeVariables(plan.store_host, store_port, secret)) rank_env[k] = std::move(v);
    workers.push_back({p.rank, p.host, "", std::move(rank_env)});
  }
  return workers;
}

// Every rank announces itself in the store when its first Communicator connects; a rank that
// has not within --start-timeout fails the job, naming its host. Called by WorkerSet::wait.
class StartWatch {
 public:
  StartWatch(const JobFlags& f, const JobPlan& plan, const WorkerSet& workers, int store_port, std::string secret)
      : f_(f), plan_(plan), workers_(workers), port_(store_port), secret_(std::move(secret)) {
    for (int r = 0; r < f.np; ++r) waiting_.insert(r);
  }

  // The reason to fail the job, or "".
  std::string operator()() {
    const auto now = std::chrono::steady_clock::now();
    if (waiting_.empty() || now - last_look_ < std::chrono::milliseconds(200)) return "";
    last_look_ = now;
    const auto soon = common::Deadline::after(std::chrono::seconds(5));
    if (!store_) store_ = std::make_unique<rendezvous::TcpStore>(plan_.store_host, port_, secret_, soon);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const bool gone = !workers_.isRunning(*it);  // a rank that ended is judged by its exit code
      it = gone || store_->tryGet("started/" + std::to_string(*it), soon) ? waiting_.erase(it) : std::next(it);
    }
    if (waiting_.empty() || now - started_at_ < std::chrono::duration<double>(f_.start_timeout)) return "";
    const int r = *waiting_.begin();
    return "rank " + std::to_string(r) + " on host " + plan_.placements[static_cast<size_t>(r)].host +
           " did not reach the rendezvous store within --start-timeout " +
           std::to_string(static_cast<int>(f_.start_timeout)) + " s (" + std::to_string(waiting_.size()) +
           " rank(s) missing)";
  }

 private:
  const JobFlags& f_;
  const JobPlan& plan_;
  const WorkerSet& workers_;
  const int port_;
  const std::string secret_;
  const std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_look_ = started_at_;
  std::set<int> waiting_;
  std::unique_ptr<rendezvous::TcpStore> store_;
};

}  // namespace

// --servers / --server-hosts: the parameter servers, numbered after the ranks in the same WorkerSet.
void startServers(const JobFlags& f, const JobPlan& plan, const Env& env, const WorkerStart& start, int store_port,
                  const std::string& secret, WorkerSet& workers) {
  const auto servers = serverWorkers(f.np, plan.server_hosts, env, plan.placements, start.is_local, start.horarun,
                                     storeVariables(plan.store_host, store_port, secret));
  for (const auto& spec : workerSpecs(servers, start)) {
    if (f.verbose) std::cerr << "horarun: parameter server " << spec.rank - f.np << " on " << spec.host << "\n";
    workers.start(spec);
    if (spec.agent_ranks.empty()) workers.relabel(spec.rank, "ps" + std::to_string(spec.rank - f.np));
  }
}

// horarun's own launcher: serves the store, starts every rank and waits for the job.
int runStaticJob(const JobFlags& f, const JobPlan& plan, const Env& env) {
  const std::string secret = common::randomSecret();
  rendezvous::TcpStoreServer store(plan.store_host, 0, secret);
  if (f.verbose)
    std::cerr << "horarun: rendezvous store on " << plan.store_host << ":" << store.port() << ", starting " << f.np
              << " ranks on " << plan.local.size() << " host(s): " << f.command[0] << "\n";
  installForwardingSignalHandlers();
  WorkerSet workers(std::chrono::milliseconds(static_cast<int64_t>(f.grace_seconds * 1000)), f.output_dir,
                    f.timestamp_output);
  StartWatch watch(f, plan, workers, store.port(), secret);
  WorkerStart start = workerStart(f);
  start.is_local = [&plan](const std::string& host) { return plan.local.at(host); };
  for (const auto& spec : workerSpecs(rankWorkers(plan, env, store.port(), secret), start)) {
    if (f.verbose && spec.agent_ranks.empty()) std::cerr << "horarun: rank " << spec.rank << " on " << spec.host << "\n";
    if (f.verbose && !spec.agent_ranks.empty())
      std::cerr << "horarun: ranks " << spec.agent_ranks.front() << "-" << spec.agent_ranks.back() << " on "
                << spec.host << " (ssh, one host agent)\n";
    workers.start(spec);
  }
  startServers(f, plan, env, start, store.port(), secret, workers);
  const int servers = static_cast<int>(plan.server_hosts.size());
  bool servers_stopped = false;
  std::vector<int> ranks(static_cast<size_t>(f.np));
  std::iota(ranks.begin(), ranks.end(), 0);
  AsyncWorkerTolerance tolerate(servers > 0 ? ranks : std::vector<int>{},
                                [&] { return storeSaysAsync(plan.store_host, store.port(), secret); });
  auto result = workers.wait(
      [&] {
        std::string why = watch();
        return why.empty() ? stopServersWhenRanksEnd(workers, f.np, servers, servers_stopped) : why;
      },
      tolerate);
  // A host agent that failed left the rank and the reason in the store.
  if (result.exit_code != 0 && !result.failed_host.empty()) {
    try {
      const auto soon = common::Deadline::after(std::chrono::seconds(2));
      rendezvous::TcpStore client(plan.store_host, store.port(), secret, soon);
      if (auto why = client.tryGet(agentReportKey(result.failed_host), soon)) result.reason = *why;
    } catch (const std::exception&) {
    }
  }
  nameFailedServer(result, f.np);  // after the agent's report, which numbers a server as a rank
  if (result.exit_code != 0) {
    std::cerr << "horarun: " << result.reason << "; the other ranks were stopped\n";
    return result.exit_code;
  }
  if (!result.tolerated.empty()) {
    std::cerr << "horarun: " << f.np - static_cast<int>(result.tolerated.size()) << " of " << f.np
              << " workers finished; the job went on without:";
    for (const auto& why : result.tolerated) std::cerr << "\n  " << why;
    std::cerr << "\n";
  } else if (f.verbose) {
    std::cerr << "horarun: all " << f.np << " ranks finished\n";
  }
  return 0;
}

}  // namespace hora::launcher
