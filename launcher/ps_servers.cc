#include "launcher/ps_servers.h"

namespace hora::launcher {

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
