#include "launcher/job_plan.h"

#include "common/knobs.h"
#include "common/socket.h"
#include "launcher/host_resolution.h"
#include "launcher/server_plan.h"
#include "launcher/remote.h"

namespace hora::launcher {

JobPlan planJob(const JobFlags& f) {
  JobPlan plan;
  plan.hosts = resolveHosts(f, common::Env::fromProcess(), f.np);
  plan.placements = placeRanks(plan.hosts, f.np);
  plan.server_hosts = placeServers(f.server_hosts, f.servers, plan.placements);
  std::vector<std::string> every_host;
  for (const auto& p : plan.placements) every_host.push_back(p.host);
  every_host.insert(every_host.end(), plan.server_hosts.begin(), plan.server_hosts.end());
  for (const auto& host : every_host) {
    if (plan.local.count(host)) continue;
    plan.local[host] = isLocalHost(host);
    if (!plan.local[host] && plan.first_remote.empty()) plan.first_remote = host;
  }
  // The store listens where every host can reach it: loopback for a local job, else our
  // address on the route to the remote hosts (or on --network-interface).
  plan.store_host = "127.0.0.1";
  if (!f.network_interface.empty()) plan.store_host = common::interfaceAddress(f.network_interface);
  else if (!plan.first_remote.empty()) plan.store_host = addressToward(plan.first_remote);
  return plan;
}

}  // namespace hora::launcher
