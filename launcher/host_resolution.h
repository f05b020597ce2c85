// Where a job's workers may run: one answer for the static launcher, the mpirun path and the
// elastic driver without a discovery script (each used to resolve hosts on its own, and the
// elastic copy ignored a Slurm allocation).
#pragma once

#include <vector>

#include "common/knobs.h"
#include "launcher/flags.h"
#include "launcher/hosts.h"

namespace hora::launcher {

// In order of precedence: --hostfile, -H, the Slurm allocation horarun runs in
// (SLURM_JOB_NODELIST with SLURM_TASKS_PER_NODE), else this host with `local_slots` slots.
// --slots-per-host sets the slots of hosts listed without a count. Throws InvalidArgumentError
// naming an unreadable hostfile or a malformed list.
std::vector<HostSlots> resolveHosts(const JobFlags& f, const common::Env& env, int local_slots);

// This machine's host name.
std::string localHostname();

}  // namespace hora::launcher
