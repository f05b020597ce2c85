// How the workers of a job start, for horarun's static launcher and its elastic driver alike:
// each worker of this host is forked (a WorkerSpec of its own, the job secret in its
// environment); the workers of a remote host share one ssh that starts horarun's host agent
// there, which forks them (host_agent.h; the plan, secret included, goes to the agent's stdin,
// never to a command line). A remote worker also gets this shell's environment beneath its own
// variables (Note [forwarded environment]).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/flags.h"
#include "launcher/hosts.h"
#include "launcher/remote.h"
#include "launcher/worker_set.h"

namespace hora::launcher {

using Env = std::map<std::string, std::string>;

// One worker to start.
struct Worker {
  int number = 0;    // the WorkerSet's number: its rank, or an elastic driver's count
  std::string host;  // as -H names it
  std::string name;  // how messages name it; empty: "rank <number>"
  Env env;           // its variables, beside (and over) the job's
  std::vector<std::string> command;  // empty: the job's (a parameter server runs horarun's own)
};

// What every worker of a job shares.
struct WorkerStart {
  std::vector<std::string> command;
  int grace_ms = 3000;                // between TERM and KILL
  SshOptions ssh;                     // connect_timeout is --start-timeout
  std::string cwd;                    // where remote workers run (this directory)
  std::string horarun;                // this horarun's path, which remote hosts must have too
  Env forwarded;                      // this shell's environment, for remote workers
  std::function<bool(const std::string&)> is_local;  // this machine?
  bool verbose = false;                               // --verbose: say what the launch decides
};

// The start of every worker of `f` from this process (its directory, path and environment).
WorkerStart workerStart(const JobFlags& f);

// A rank's variables as horarun sets them: HORA_RANK, HORA_SIZE, the local and cross ranks,
// HORA_HOSTNAME, and the same under horovodrun's HOROVOD_* names (scripts read those).
Env rankVariables(const Placement& p);
// Where the job's store is: HORA_RENDEZVOUS_ADDR, HORA_RENDEZVOUS_PORT, HORA_SECRET.
Env storeVariables(const std::string& address, int port, const std::string& secret);

// The specs that start `workers`: one per worker of this host, in their order, then one per
// remote host and command (in the order of its first worker) running all of those workers.
std::vector<WorkerSpec> workerSpecs(const std::vector<Worker>& workers, const WorkerStart& start);

}  // namespace hora::launcher
