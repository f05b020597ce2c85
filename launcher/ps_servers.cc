#include "launcher/ps_servers.h"

#include <chrono>
#include <exception>

#include "common/deadline.h"
#include "ps/server.h"
#include "rendezvous/tcp_store.h"

namespace hora::launcher {

bool storeSaysAsync(const std::string& host, int port, const std::string& secret) {
  try {
    const auto soon = common::Deadline::after(std::chrono::seconds(2));
    rendezvous::TcpStore store(host, port, secret, soon);
    return store.tryGet(ps::kAsyncJobKey, soon).has_value();
  } catch (const std::exception&) {
    return false;
  }
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
