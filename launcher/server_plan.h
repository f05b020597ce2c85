// Where a job's parameter servers run and how each is started (docs/parameter_servers.md):
// decisions only, apart from launcher/ps_servers (which starts and stops them) so that the unit
// tests (tests/cpp/launcher) check them.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/worker_start.h"

namespace hora::launcher {

// The flag horarun runs a server with (not a user's flag: not in --help).
inline constexpr const char* kPsServerFlag = "--ps-server";

// The host of each server. Without `server_hosts`, server k runs on the k-th host of the ranks
// in turn (hosts in the order of their first rank, wrapping around). With it ("c:1,d:2" as -H
// takes it; a count is how many servers that host may run), the servers go to those hosts one
// per host in turn while a host has room; `servers` = 0 means the counts' sum. Throws
// InvalidArgumentError for more servers than the counts allow or a host listed twice.
std::vector<std::string> placeServers(const std::string& server_hosts, int servers,
                                      const std::vector<Placement>& ranks);

// How many servers --servers and --server-hosts ask for (the counts' sum when --servers is 0);
// InvalidArgumentError as placeServers.
int serverCount(const std::string& server_hosts, int servers);

// The servers as workers numbered np, np+1, ... after the ranks, named "parameter server k",
// running `horarun --ps-server`. A server's HORA_HOSTNAME is the name the ranks of its host
// know it by, so that the pairs on one host use shared memory; `is_local` says which hosts are
// this machine. `generation` >= 0: the servers of that generation of an elastic job
// (HORA_PS_GENERATION), serving its np ranks under its store prefix.
std::vector<Worker> serverWorkers(int np, const std::vector<std::string>& hosts, const Env& env,
                                  const std::vector<Placement>& ranks,
                                  const std::function<bool(const std::string&)>& is_local,
                                  const std::string& horarun, const Env& store, int generation = -1);

// In ps-async mode the servers go on without a worker that died (they drop it from the staleness
// gate), and so does the job: WorkerSet::wait's `tolerate`, which lets a failed worker go while
// the job is asynchronous and some other worker has not failed. Anything else (a server, a
// ps-sync or allreduce job, a worker dead before its optimizer registered, the last worker)
// stops the job as before.
class AsyncWorkerTolerance {
 public:
  // `workers`: the ranks that are workers (horarun: 0..np-1; a host agent: its ranks, or none
  // when it runs a server). `job_is_async` is asked at a failure, until it says yes.
  AsyncWorkerTolerance(std::vector<int> workers, std::function<bool()> job_is_async)
      : workers_(workers.begin(), workers.end()), job_is_async_(std::move(job_is_async)) {}
  // Why the job goes on without `ranks` (a worker, or a host agent's), or "".
  std::string operator()(const std::vector<int>& ranks);

 private:
  std::set<int> workers_, failed_;
  std::function<bool()> job_is_async_;
  bool async_ = false;
};

}  // namespace hora::launcher
