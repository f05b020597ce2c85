// Where a job's parameter servers run and how each is started (docs/parameter_servers.md):
// decisions only, apart from launcher/ps_servers (which starts and stops them) so that the unit
// tests (tests/cpp/launcher) check them.
#pragma once

#include <functional>
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

// The servers as workers numbered np, np+1, ... after the ranks, named "parameter server k",
// running `horarun --ps-server`. A server's HORA_HOSTNAME is the name the ranks of its host
// know it by, so that the pairs on one host use shared memory; `is_local` says which hosts are
// this machine.
std::vector<Worker> serverWorkers(int np, const std::vector<std::string>& hosts, const Env& env,
                                  const std::vector<Placement>& ranks,
                                  const std::function<bool(const std::string&)>& is_local,
                                  const std::string& horarun, const Env& store);

}  // namespace hora::launcher
