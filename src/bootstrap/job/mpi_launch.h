// A job that another MPI launcher started: OpenMPI's mpirun (OMPI_COMM_WORLD_*, PMIx), MPICH's
// Hydra (PMI_*, PMI-1 over PMI_FD) or Slurm's srun (SLURM_*). Its ranks are a ForeignStart
// (foreign.h).
#pragma once

#include <optional>
#include <string>

#include "bootstrap/job/foreign.h"
#include "common/knobs.h"

namespace hora::bootstrap {

// What the launcher's variables say, nullopt when none of them is set.
std::optional<ForeignLaunch> detectMpiLaunch(const common::Env& env);

// "node[01-04],gpu7" -> "node01": the first host of a Slurm host list.
std::string firstSlurmHost(const std::string& list);

}  // namespace hora::bootstrap
