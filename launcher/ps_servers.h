// horarun --servers K / --server-hosts: the parameter server processes of a job, beside its
// workers (docs/parameter_servers.md). Each runs as `horarun --ps-server` (this same executable,
// at the same path on a remote host, as for host agents), with the job's store and secret in its
// environment like any rank: forked here on this host, started over ssh through a host agent of
// its own on another. They are watched by the job's WorkerSet: a server that fails stops the
// job, and the job ends when the workers have left and the servers have exited.
#pragma once

#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/worker_set.h"
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

// Once every rank has exited (successfully: a failure ends the job first), stops the servers
// (SIGTERM, on which a server exits with 0): a server still waiting for a worker that never
// connected (a job whose optimizer uses no servers) would otherwise hold the job for
// HORA_PS_START_TIMEOUT_SECONDS. Called from WorkerSet::wait's check; returns "" (no failure).
std::string stopServersWhenRanksEnd(WorkerSet& workers, int np, int servers, bool& stopped);

// A failed server is reported as "rank <np+k> ..." by the WorkerSet: name it as a server.
void nameFailedServer(JobResult& result, int np);

}  // namespace hora::launcher
