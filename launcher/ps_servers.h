// horarun --servers K: the parameter server processes of a job, beside its workers
// (docs/parameter_servers.md). They run on horarun's host, as `horarun --ps-server` (this same
// executable), with the job's store and secret in their environment like any rank, and are
// watched by the same WorkerSet: a server that fails stops the job, and the job ends when the
// workers have left and the servers have exited.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/worker_set.h"

namespace hora::launcher {

// The flag horarun runs a server with (not a user's flag: not in --help).
inline constexpr const char* kPsServerFlag = "--ps-server";

// The servers' WorkerSet entries: numbered np, np+1, ... after the ranks, named
// "parameter server k". `hostname`: their HORA_HOSTNAME (the name this host's ranks have, so
// that the pairs on this host use shared memory).
std::vector<WorkerSpec> serverSpecs(int np, int servers, std::map<std::string, std::string> env,
                                    const std::string& hostname, const std::string& store_host, int store_port,
                                    const std::string& secret);

// Once every rank has exited (successfully: a failure ends the job first), stops the servers
// (SIGTERM, on which a server exits with 0): a server still waiting for a worker that never
// connected (a job whose optimizer uses no servers) would otherwise hold the job for
// HORA_PS_START_TIMEOUT_SECONDS. Called from WorkerSet::wait's check; returns "" (no failure).
std::string stopServersWhenRanksEnd(WorkerSet& workers, int np, int servers, bool& stopped);

// A failed server is reported as "rank <np+k> ..." by the WorkerSet: name it as a server.
void nameFailedServer(JobResult& result, int np);

}  // namespace hora::launcher
