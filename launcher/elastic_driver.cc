#include "launcher/elastic_driver.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "bootstrap/job/elastic_join.h"
#include "common/crypto.h"
#include "common/knobs.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "launcher/elastic_planner.h"
#include "launcher/host_discovery.h"
#include "launcher/host_resolution.h"
#include "launcher/remote.h"
#include "launcher/server_plan.h"
#include "launcher/worker_set.h"
#include "launcher/worker_start.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the discovery script runs (horovodrun: every second).
constexpr auto kDiscoveryPeriod = std::chrono::seconds(1);
// How often the driver looks for exited workers and new joins, forwarding output in between: a
// failure is reported, and the next generation formed, within about this much. A look is a
// waitpid and one request to the driver's own store.
constexpr auto kLookPeriod = std::chrono::milliseconds(10);
// How long members of a generation may take to ask to join after the first did before they are
// taken for stuck (stopped, or their link is down): the knob HORA_ELASTIC_JOIN_WINDOW_SECONDS, from
// -x or horarun's environment, default 10 s. A live worker re-joins within its collective's
// timeout (HORA_TIMEOUT_SECONDS), so the window should not be shorter than that.
milliseconds joinWindowOf(const Env& worker_env) {
  constexpr const char* kKnob = "HORA_ELASTIC_JOIN_WINDOW_SECONDS";
  const common::Env env = common::Env::fromProcess().overriddenBy(worker_env);
  if (env.getString(kKnob).empty()) return std::chrono::seconds(10);
  return milliseconds(static_cast<int64_t>(env.getDouble(kKnob, 0.001, 86400) * 1000));
}

// How the elastic driver starts its workers: every one on this machine, whatever its host, when
// HORA_ELASTIC_WORKERS_HERE=1 is in horarun's own environment (set by hora.ray's elastic executor,
// whose worker command is a local proxy that places the worker as a Ray actor on that host:
// python/hora/ray/elastic_job.py). Not a user knob: with it no host is reached through ssh.
WorkerStart elasticWorkerStart(const JobFlags& f) {
  WorkerStart start = workerStart(f);
  if (common::processVariable("HORA_ELASTIC_WORKERS_HERE").value_or("") == "1")
    start.is_local = [](const std::string&) { return true; };
  return start;
}

ElasticLimits limitsOf(const JobFlags& f, const Env& worker_env) {
  ElasticLimits l;
  l.min_np = f.elastic.min_np > 0 ? f.elastic.min_np : f.np;
  if (f.elastic.max_np > 0) l.max_np = f.elastic.max_np;
  l.reset_limit = f.elastic.reset_limit;
  l.elastic_timeout = milliseconds(static_cast<int64_t>(f.elastic.timeout_seconds * 1000));
  l.join_window = joinWindowOf(worker_env);
  l.fixed_hosts = f.elastic.discovery_script.empty();
  if (f.elastic.cooldown_range.size() == 2) {
    l.cooldown_min = milliseconds(static_cast<int64_t>(f.elastic.cooldown_range[0] * 1000));
    l.cooldown_max = milliseconds(static_cast<int64_t>(f.elastic.cooldown_range[1] * 1000));
  }
  return l;
}

// Where the store listens and the address each host's workers call it at (which is also the
// address a worker advertises to its ring: the local address of its store connection). Hosts
// discovered later may sit behind another interface than the first ones, so unless every host is
// this one and fixed, the store listens on every interface (it refuses frames without the job's
// secret), each remote host is told this machine's address on its route, and local workers an
// address the other hosts can reach. --network-interface pins one address for all.
class StoreReach {
 public:
  StoreReach(const JobFlags& f, const std::vector<HostSlots>& first_hosts) {
    if (!f.network_interface.empty()) {
      listen_ = local_ = common::interfaceAddress(f.network_interface);
      pinned_ = true;
      return;
    }
    auto remote = std::find_if(first_hosts.begin(), first_hosts.end(),
                               [](const HostSlots& h) { return !isLocalHost(h.host); });
    if (remote != first_hosts.end()) local_ = addressToward(remote->host);
    else if (!f.elastic.discovery_script.empty()) local_ = routableOwnAddress();
    else local_ = "127.0.0.1";
    listen_ = local_ == "127.0.0.1" ? local_ : "0.0.0.0";
  }
  const std::string& listenAddress() const { return listen_; }
  // The driver's own client.
  std::string selfAddress() const { return listen_ == "0.0.0.0" ? "127.0.0.1" : listen_; }
  // Throws InvalidArgumentError naming the host when it has no route from here.
  std::string addressFor(const std::string& host) {
    if (pinned_) return local_;
    auto it = by_host_.find(host);
    if (it == by_host_.end()) it = by_host_.emplace(host, isLocalHost(host) ? local_ : addressToward(host)).first;
    return it->second;
  }

 private:
  std::string listen_, local_;
  bool pinned_ = false;
  std::map<std::string, std::string> by_host_;
};

milliseconds drawCooldown(milliseconds min, milliseconds max) {
  static std::mt19937_64 random{std::random_device{}()};
  return milliseconds(std::uniform_int_distribution<int64_t>(min.count(), max.count())(random));
}

class ElasticDriver {
 public:
  ElasticDriver(const JobFlags& f, Env env, std::vector<HostSlots> first_hosts)
      : f_(f),
        env_(std::move(env)),
        first_hosts_(std::move(first_hosts)),
        secret_(common::randomSecret()),
        start_(elasticWorkerStart(f)),
        reach_(f, first_hosts_),
        store_(reach_.listenAddress(), 0, secret_),
        workers_(milliseconds(static_cast<int64_t>(f.grace_seconds * 1000)), f.output_dir, f.timestamp_output),
        planner_(limitsOf(f, env_), drawCooldown),
        server_count_(serverCount(f.server_hosts, f.servers)) {
    if (!f.elastic.discovery_script.empty())
      discovery_.emplace(f.elastic.discovery_script, f.slots_per_host > 0 ? f.slots_per_host : 1);
  }

  int run() {
    installForwardingSignalHandlers();
    client_ = std::make_unique<rendezvous::TcpStore>(reach_.selfAddress(), store_.port(), secret_,
                                                     common::Deadline::after(std::chrono::seconds(10)));
    if (f_.verbose)
      std::cerr << "horarun: elastic job, rendezvous store on " << reach_.listenAddress() << ":" << store_.port()
                << "\n";
    ElasticPlanner::Decisions first;
    planner_.hostsDiscovered(first_hosts_, Clock::now(), first);
    if (std::optional<int> code = apply(first)) return *code;
    auto next_discovery = Clock::now() + kDiscoveryPeriod;
    for (;;) {
      ElasticPlanner::Decisions d;
      for (const auto& [id, why] : std::exchange(unstartable_, {})) planner_.exited(id, true, why, Clock::now(), d);
      for (const WorkerSet::Exit& e : workers_.reap(kLookPeriod)) exited(e, d);
      if (const int sig = takePendingSignal()) {
        std::cerr << "horarun: received signal " << strsignal(sig) << "; stopping the workers\n";
        workers_.stopAll();
        return 128 + sig;
      }
      if (discovery_ && Clock::now() >= next_discovery) {
        if (auto hosts = discovery_->discover(std::chrono::seconds(10))) planner_.hostsDiscovered(*hosts, Clock::now(), d);
        next_discovery = Clock::now() + kDiscoveryPeriod;
      }
      readJoins(d);
      planner_.tick(Clock::now(), d);
      if (std::optional<int> code = apply(d)) return *code;
    }
  }

 private:
  common::Deadline soon() const { return common::Deadline::after(std::chrono::seconds(10)); }

  // "worker a:1 was killed by signal 9 (Killed)": the WorkerSet's text names the driver's number
  // for the worker, which is no rank.
  static std::string exitText(const std::string& id, const WorkerSet::Exit& e) {
    std::string what = e.why;
    for (const char* verb : {" exited with ", " was killed by "})
      if (const auto at = e.why.find(verb); at != std::string::npos) {
        what = e.why.substr(at + 1);
        break;
      }
    return "worker " + id + (e.agent_ranks.empty() ? " " : " (its host's ssh and host agent) ") + what;
  }

  void exited(const WorkerSet::Exit& e, ElasticPlanner::Decisions& d) {
    std::vector<int> numbers = e.agent_ranks.empty() ? std::vector<int>{e.rank} : e.agent_ranks;
    for (int n : numbers) {
      if (auto server = servers_.find(n); server != servers_.end()) {
        serverExited(server->second, e);
        servers_.erase(server);
      } else if (auto id = ids_.find(n); id != ids_.end()) {
        // A killed process never leaves its failure report; one that exited did, if at all.
        if (e.why.find(" was killed by ") != std::string::npos)
          d.reports.push_back({planner_.generation(), planner_.rankOf(id->second), "horarun: " + exitText(id->second, e)});
        planner_.exited(id->second, e.failed, exitText(id->second, e), Clock::now(), d);
        forget(id);
      }
    }
  }

  // A server of the running generation ended without being stopped. Its workers fail their next
  // exchange with it (PeerError naming it) and re-join, as after a lost worker; the next generation
  // gets new servers. Its host is not blacklisted: a server holds no state a new one lacks, and the
  // host may run ranks. Exiting 0 (every worker said goodbye: training ended) needs no word.
  void serverExited(int index, const WorkerSet::Exit& e) {
    if (!e.failed) return;
    const std::string prefix = bootstrap::generationPrefix(planner_.generation());
    std::string who = "host " + server_hosts_[static_cast<size_t>(index)];
    try {
      // "host h, pid p", as the server published it for its workers' messages.
      if (auto published = client_->tryGet(prefix + "ps/server/" + std::to_string(index), soon())) who = *published;
    } catch (const Error&) {
    }
    std::string what = e.why;
    for (const char* verb : {" exited with ", " was killed by "})
      if (const auto at = e.why.find(verb); at != std::string::npos) what = e.why.substr(at + 1);
    std::cerr << "horarun: parameter server " << index << " (" << who << ") of generation " << planner_.generation()
              << " " << what << "; its workers re-join and the next generation starts new servers\n";
  }

  // The joins that arrived since the last look (a worker bumps elastic/joins after its join key).
  void readJoins(ElasticPlanner::Decisions& d) {
    const int64_t joins = client_->add(bootstrap::kElasticJoinCountKey, 0, soon());
    if (joins == joins_seen_) return;
    joins_seen_ = joins;
    for (const auto& [number, id] : ids_) {
      auto nonce = client_->tryGet(bootstrap::elasticJoinKey(id), soon());
      if (!nonce || nonces_[id] == *nonce) continue;
      nonces_[id] = *nonce;
      planner_.joined(id, *nonce, Clock::now(), d);
    }
    readVerdicts(d);
  }

  // Before the stops: a stopped member's peers read why at once (Note [failure reports]). Best
  // effort, as the reports.
  void leaveReports(const ElasticPlanner::Decisions& d) {
    for (const auto& r : d.reports) {
      if (r.generation < 0 || r.rank < 0) continue;
      try {
        client_->set(bootstrap::failureReportKey(bootstrap::generationPrefix(r.generation), r.rank), r.text, soon());
      } catch (const Error& e) {
        std::cerr << "horarun: could not leave rank " << r.rank << "'s failure report: " << e.what() << "\n";
      }
    }
  }

  // A survivor that fails because a peer's heartbeat went silent writes the verdict under its
  // generation before it re-joins (Note [heartbeat]): that member is left behind at once.
  void readVerdicts(ElasticPlanner::Decisions& d) {
    const int generation = planner_.generation();
    if (generation < 0) return;
    for (const auto& [number, id] : ids_) {
      const int rank = planner_.rankOf(id);
      if (rank < 0) continue;
      if (auto verdict = client_->tryGet(bootstrap::silentRankKey(bootstrap::generationPrefix(generation), rank), soon()))
        planner_.declaredDead(rank, *verdict, Clock::now(), d);
    }
  }

  // Carries out the planner's decisions; the job's exit code once it ends.
  std::optional<int> apply(ElasticPlanner::Decisions& d) {
    for (const auto& note : d.notes) std::cerr << "horarun: " << note << "\n";
    leaveReports(d);
    for (size_t i = 0; i < d.answers.size(); ++i)
      client_->set(bootstrap::elasticAnswerKey(d.answers[i].first, d.answers[i].second), d.answer_values[i], soon());
    if (!d.hosts_updated.empty()) {
      ++hosts_updated_;
      client_->set(bootstrap::kElasticHostsUpdatedKey, std::to_string(hosts_updated_) + " " + d.hosts_updated, soon());
      if (f_.verbose) std::cerr << "horarun: hosts " << d.hosts_updated << "; the workers re-join at their next commit\n";
    }
    if (d.generation_formed) announceGeneration();
    for (const auto& id : d.stop)
      if (auto n = numbers_.find(id); n != numbers_.end()) workers_.stop(n->second);
    start(d.start);
    if (!d.end_code) return std::nullopt;
    workers_.stopAll();
    workers_.drainOutput(std::chrono::seconds(1));
    if (*d.end_code != 0) std::cerr << "horarun: " << d.end_reason << "\n";
    else if (f_.verbose) std::cerr << "horarun: training finished\n";
    return *d.end_code;
  }

  // An exited worker's number: a worker started later in its host:slot takes the same id.
  void forget(std::map<int, std::string>::iterator number_and_id) {
    if (auto n = numbers_.find(number_and_id->second); n != numbers_.end() && n->second == number_and_id->first)
      numbers_.erase(n);
    ids_.erase(number_and_id);
  }

  void announceGeneration() {
    client_->set("elastic/generation", std::to_string(planner_.generation()), soon());
    // The members printed their last lines of the old generation before they asked to join.
    workers_.forwardWrittenOutput();
    int size = 0;
    for (const auto& [number, id] : ids_) {
      const int rank = planner_.rankOf(id);
      workers_.relabel(number, rank >= 0 ? std::to_string(rank) : id);
      size += rank >= 0;
    }
    std::cerr << "horarun: generation " << planner_.generation() << ": " << size << " rank(s)\n";
    startServers(size);
  }

  // Note [servers of a generation]: parameter servers hold nothing a re-formed job needs (ps-sync
  // sums one step at a time; ps-async starts again from worker 0's parameters, the restored
  // commit), so each generation gets servers of its own: the previous ones are stopped, and K new
  // ones serve the new ranks under the generation's store prefix, where nothing of the old ones
  // can be read. Servers on --server-hosts stay there; the others go to the new ranks' hosts.
  void startServers(int size) {
    for (const auto& [number, index] : std::exchange(servers_, {})) workers_.stop(number);
    if (server_count_ == 0) return;
    std::vector<Placement> ranks(static_cast<size_t>(size));
    for (const auto& [number, id] : ids_)
      if (const int rank = planner_.rankOf(id); rank >= 0) ranks[static_cast<size_t>(rank)] = {hosts_.at(id), rank};
    server_hosts_ = placeServers(f_.server_hosts, f_.servers, ranks);
    auto servers = serverWorkers(size, server_hosts_, env_, ranks, start_.is_local, start_.horarun,
                                 storeVariables("", store_.port(), secret_), planner_.generation());
    for (size_t k = 0; k < servers.size(); ++k) {
      servers[k].number = next_number_++;
      servers[k].env["HORA_RENDEZVOUS_ADDR"] = reach_.addressFor(servers[k].host);
      servers_[servers[k].number] = static_cast<int>(k);
    }
    for (const WorkerSpec& spec : workerSpecs(servers, start_)) {
      if (f_.verbose) std::cerr << "horarun: parameter server " << servers_.at(spec.rank) << " on " << spec.host << "\n";
      workers_.start(spec);
      if (spec.agent_ranks.empty()) workers_.relabel(spec.rank, "ps" + std::to_string(servers_.at(spec.rank)));
    }
  }

  Env workerEnvironment(const ElasticPlanner::Worker& w, const std::string& store_address) const {
    Env env = env_;
    env["HORA_ELASTIC"] = "1";
    env["HORA_ELASTIC_WORKER_ID"] = w.id;
    env["HORA_ELASTIC_TIMEOUT_SECONDS"] = std::to_string(static_cast<int64_t>(f_.elastic.timeout_seconds));
    // The rank variables of the place the worker starts in, as horovodrun sets them; each
    // generation's own ranks come through the store at hvd.init() (docs/elastic.md).
    const ElasticPlanner::Placement& p = w.started_as;
    for (auto& [k, v] : rankVariables({w.host, p.rank, p.local_rank, p.local_size, p.cross_rank, p.cross_size, p.size}))
      env[k] = std::move(v);
    for (auto& [k, v] : storeVariables(store_address, store_.port(), secret_)) env[k] = std::move(v);
    return env;
  }

  // Numbers the new workers (ranks change with each generation) and starts them as every job's
  // workers start (worker_start.h).
  void start(const std::vector<ElasticPlanner::Worker>& started) {
    std::vector<Worker> workers;
    for (const auto& w : started) {
      const int number = next_number_++;
      ids_[number] = w.id;
      numbers_[w.id] = number;
      hosts_[w.id] = w.host;
      std::string store_address;
      try {
        store_address = reach_.addressFor(w.host);
      } catch (const InvalidArgumentError& e) {
        // A discovered host we cannot reach fails like a worker that died at once: blacklisted.
        unstartable_.emplace_back(w.id, "worker " + w.id + " cannot start: " + e.what());
        std::cerr << "horarun: " << unstartable_.back().second << "\n";
        continue;
      }
      workers_.relabel(number, w.id);
      workers.push_back({number, w.host, "worker " + w.id, workerEnvironment(w, store_address)});
    }
    for (const WorkerSpec& spec : workerSpecs(workers, start_)) workers_.start(spec);
  }

  const JobFlags& f_;
  const Env env_;
  const std::vector<HostSlots> first_hosts_;
  const std::string secret_;
  const WorkerStart start_;
  StoreReach reach_;
  rendezvous::TcpStoreServer store_;
  std::unique_ptr<rendezvous::TcpStore> client_;
  WorkerSet workers_;
  ElasticPlanner planner_;
  std::optional<HostDiscovery> discovery_;
  std::map<int, std::string> ids_;       // the WorkerSet's number of each worker -> its id
  std::map<std::string, int> numbers_;   // and back
  std::map<std::string, std::string> hosts_;  // each worker id's host
  const int server_count_;                    // --servers / --server-hosts: K per generation
  std::map<int, int> servers_;                // the running generation's servers: WorkerSet number -> index
  std::vector<std::string> server_hosts_;     // and their hosts, by index
  std::map<std::string, std::string> nonces_;  // the last join read of each worker
  std::vector<std::pair<std::string, std::string>> unstartable_;  // (worker id, why), reported as exits
  int next_number_ = 0;
  int64_t joins_seen_ = -1;
  int64_t hosts_updated_ = 0;
};

}  // namespace

int runElasticJob(const JobFlags& f, const Env& worker_env) {
  std::vector<HostSlots> hosts;
  if (!f.elastic.discovery_script.empty()) {
    // The first discovery decides where the store listens; it must succeed.
    HostDiscovery discovery(f.elastic.discovery_script, f.slots_per_host > 0 ? f.slots_per_host : 1);
    auto found = discovery.discover(std::chrono::seconds(30));
    if (!found) throw InvalidArgumentError("--host-discovery-script " + f.elastic.discovery_script + " failed at start");
    hosts = *found;
  } else {
    hosts = resolveHosts(f, common::Env::fromProcess(), f.np);
  }
  return ElasticDriver(f, worker_env, hosts).run();
}

}  // namespace hora::launcher
