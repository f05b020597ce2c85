// horarun --servers K / --server-hosts: the parameter server processes of a job, beside its
// workers (docs/parameter_servers.md). Each runs as `horarun --ps-server` (this same executable,
// at the same path on a remote host, as for host agents), with the job's store and secret in its
// environment like any rank: forked here on this host, started over ssh through a host agent of
// its own on another. They are watched by the job's WorkerSet: a server that fails stops the
// job, and the job ends when the workers have left and the servers have exited.
#pragma once

#include <string>
#include <vector>

#include "launcher/server_plan.h"
#include "launcher/worker_set.h"

namespace hora::launcher {

// Once every rank has exited (successfully: a failure ends the job first), stops the servers
// (SIGTERM, on which a server exits with 0): a server still waiting for a worker that never
// connected (a job whose optimizer uses no servers) would otherwise hold the job for
// HORA_PS_START_TIMEOUT_SECONDS. Called from WorkerSet::wait's check; returns "" (no failure).
std::string stopServersWhenRanksEnd(WorkerSet& workers, int np, int servers, bool& stopped);

// Whether the job's store (at host:port) has ps::kAsyncJobKey; false when it cannot be reached.
bool storeSaysAsync(const std::string& host, int port, const std::string& secret);

// A failed server is reported as "rank <np+k> ..." by the WorkerSet: name it as a server.
void nameFailedServer(JobResult& result, int np);

}  // namespace hora::launcher
