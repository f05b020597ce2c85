#include "launcher/ps_servers.h"

#include <filesystem>

namespace hora::launcher {

std::vector<WorkerSpec> serverSpecs(int np, int servers, std::map<std::string, std::string> env,
                                    const std::string& hostname, const std::string& store_host, int store_port,
                                    const std::string& secret) {
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  env["HORA_SIZE"] = std::to_string(np);  // a server's HORA_SIZE is the number of workers it serves
  env["HORA_PS_SERVERS"] = std::to_string(servers);
  env["HORA_HOSTNAME"] = hostname;
  env["HORA_RENDEZVOUS_ADDR"] = store_host;
  env["HORA_RENDEZVOUS_PORT"] = std::to_string(store_port);
  env["HORA_SECRET"] = secret;
  env.erase("HORA_RANK");
  std::vector<WorkerSpec> specs;
  for (int k = 0; k < servers; ++k) {
    WorkerSpec spec;
    spec.rank = np + k;
    spec.host = hostname;
    spec.name = "parameter server " + std::to_string(k);
    spec.argv = {self, kPsServerFlag};
    spec.env = env;
    spec.env["HORA_PS_SERVER_INDEX"] = std::to_string(k);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string stopServersWhenRanksEnd(WorkerSet& workers, int np, int servers, bool& stopped) {
  if (stopped || servers == 0) return "";
  for (int r = 0; r < np; ++r)
    if (workers.isRunning(r)) return "";
  for (int k = 0; k < servers; ++k) workers.stop(np + k);
  stopped = true;
  return "";
}

void nameFailedServer(JobResult& result, int np) {
  if (result.failed_rank < np) return;
  const std::string rank = "rank " + std::to_string(result.failed_rank);
  if (result.reason.rfind(rank, 0) == 0)
    result.reason = "parameter server " + std::to_string(result.failed_rank - np) + result.reason.substr(rank.size());
}

}  // namespace hora::launcher
