#include "launcher/server_plan.h"

#include <set>

#include "hora/errors.h"

namespace hora::launcher {

namespace {

// The ranks' hosts, each once, in the order of their first rank.
std::vector<std::string> rankHosts(const std::vector<Placement>& ranks) {
  std::vector<std::string> hosts;
  std::set<std::string> seen;
  for (const auto& p : ranks)
    if (seen.insert(p.host).second) hosts.push_back(p.host);
  return hosts;
}

std::vector<std::string> placeOnListedHosts(const std::string& spec, int servers) {
  const std::vector<HostSlots> listed = parseHostList(spec);
  std::set<std::string> seen;
  int room = 0;
  for (const auto& h : listed) {
    if (!seen.insert(h.host).second) throw InvalidArgumentError("--server-hosts lists host " + h.host + " twice");
    room += h.slots;
  }
  if (servers == 0) servers = room;
  if (servers > room)
    throw InvalidArgumentError("--servers " + std::to_string(servers) + " is more than the " + std::to_string(room) +
                               " that --server-hosts " + spec + " has room for");
  std::vector<std::string> hosts;
  std::vector<int> left;
  for (const auto& h : listed) left.push_back(h.slots);
  while (static_cast<int>(hosts.size()) < servers)
    for (size_t i = 0; i < listed.size() && static_cast<int>(hosts.size()) < servers; ++i)
      if (left[i]-- > 0) hosts.push_back(listed[i].host);
  return hosts;
}

}  // namespace

std::vector<std::string> placeServers(const std::string& server_hosts, int servers,
                                      const std::vector<Placement>& ranks) {
  if (!server_hosts.empty()) return placeOnListedHosts(server_hosts, servers);
  const std::vector<std::string> hosts = rankHosts(ranks);
  std::vector<std::string> placed;
  for (int k = 0; k < servers && !hosts.empty(); ++k) placed.push_back(hosts[static_cast<size_t>(k) % hosts.size()]);
  return placed;
}

int serverCount(const std::string& server_hosts, int servers) {
  return server_hosts.empty() ? servers : static_cast<int>(placeOnListedHosts(server_hosts, servers).size());
}

std::vector<Worker> serverWorkers(int np, const std::vector<std::string>& hosts, const Env& env,
                                  const std::vector<Placement>& ranks,
                                  const std::function<bool(const std::string&)>& is_local,
                                  const std::string& horarun, const Env& store, int generation) {
  // A server on this machine takes the name of this machine's ranks ("localhost" and
  // "127.0.0.1" are one host to the user, but shared memory needs equal names).
  std::string local_rank_host;
  for (const auto& p : ranks)
    if (local_rank_host.empty() && is_local(p.host)) local_rank_host = p.host;
  Env common = env;
  for (const auto& [k, v] : store) common[k] = v;
  common["HORA_SIZE"] = std::to_string(np);  // a server's HORA_SIZE is the number of workers it serves
  common["HORA_PS_SERVERS"] = std::to_string(hosts.size());
  common.erase("HORA_RANK");
  if (generation >= 0) common["HORA_PS_GENERATION"] = std::to_string(generation);
  std::vector<Worker> servers;
  for (size_t k = 0; k < hosts.size(); ++k) {
    Worker w;
    w.number = np + static_cast<int>(k);
    w.host = hosts[k];
    w.name = "parameter server " + std::to_string(k);
    w.command = {horarun, kPsServerFlag};
    w.env = common;
    w.env["HORA_HOSTNAME"] = is_local(hosts[k]) && !local_rank_host.empty() ? local_rank_host : hosts[k];
    w.env["HORA_PS_SERVER_INDEX"] = std::to_string(k);
    servers.push_back(std::move(w));
  }
  return servers;
}

std::string AsyncWorkerTolerance::operator()(const std::vector<int>& ranks) {
  for (int r : ranks)
    if (!workers_.count(r)) return "";
  failed_.insert(ranks.begin(), ranks.end());
  if (failed_.size() >= workers_.size()) return "";  // no worker left to go on
  if (!async_) async_ = job_is_async_();
  if (!async_) return "";
  const size_t left = workers_.size() - failed_.size();
  return "the job trains asynchronously through its parameter servers, so its other " + std::to_string(left) +
         " worker(s) go on without " + (ranks.size() > 1 ? "them" : "it");
}

}  // namespace hora::launcher
