// The host agent: horarun's side on a remote host, one per host and job, so that a job costs one
// ssh connection per host rather than one per rank (as mpirun's daemons do).
//
// horarun runs `horarun --host-agent` there over ssh (sshHostAgentArgv in remote.h) and writes
// a HostPlan to its stdin: the host's ranks, each with its whole environment (the job secret
// among it, so that it stays off every command line), and the command. The agent forks the
// ranks with a WorkerSet of its own, so each rank's output reaches horarun already prefixed
// "[rank]<stdout>:" (horarun passes those lines through), the first rank that fails stops the
// others, and signals are forwarded. stdin then stays open: when it closes (horarun or its ssh
// died) the agent stops its ranks (TERM, KILL after the grace period). The agent exits with the
// code of its first failed rank (0 when every rank succeeded) and, on failure, leaves the
// reason ("rank 3 on host b exited with code 5") in the job's store under agentReportKey(host).
#pragma once

#include <string>

#include "launcher/host_plan.h"

namespace hora::launcher {

// The store key under which an agent leaves the reason its host's ranks failed.
std::string agentReportKey(const std::string& host);

// The agent's main(): reads the plan from stdin (within `plan_timeout`), runs it, returns the
// process's exit code.
int runHostAgent(int plan_timeout_ms = 30000);

}  // namespace hora::launcher
