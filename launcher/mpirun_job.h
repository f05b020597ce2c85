// horarun --mpi: the job handed to mpirun (OpenMPI's or MPICH's, whichever `mpirun` is). The
// ranks then find each other as any mpirun-started hora job does (src/bootstrap/job/foreign.h:
// rank 0's store through the launcher's key-value service); the job secret and every -x / knob
// variable travel in the environment (named, not valued, on mpirun's command line).
#pragma once

#include <map>
#include <string>

#include "launcher/flags.h"
#include "launcher/job_plan.h"

namespace hora::launcher {

// Execs mpirun with `env` (workerEnvironment(f)) and the environment horarun forwards to remote
// ranks exported; returns mpirun's exit code when it ran as a child (Hydra
// with ssh options), else only when mpirun cannot be executed.
int runMpirunJob(const JobFlags& f, const JobPlan& plan, std::map<std::string, std::string> env);

}  // namespace hora::launcher
