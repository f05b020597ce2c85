#include "bootstrap/job/mpi_launch.h"

#include <unistd.h>

namespace hora::bootstrap {

std::optional<ForeignLaunch> detectMpiLaunch(const common::Env& env) {
  ForeignLaunch job;
  if (env.isSet("OMPI_COMM_WORLD_SIZE")) {
    job.launcher = "OpenMPI";
    job.size = static_cast<int>(env.getInt("OMPI_COMM_WORLD_SIZE", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("OMPI_COMM_WORLD_RANK", 0, job.size - 1));
    job.single_host = env.isSet("OMPI_COMM_WORLD_LOCAL_SIZE") &&
                      env.getInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1, job.size) == job.size;
    job.job_id = env.getString("OMPI_MCA_ess_base_jobid");
    if (env.isSet("PMIX_NAMESPACE")) job.launcher_kvs = "pmix";
  } else if (env.isSet("PMI_SIZE")) {
    job.launcher = "MPICH";
    job.size = static_cast<int>(env.getInt("PMI_SIZE", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("PMI_RANK", 0, job.size - 1));
    job.single_host = env.isSet("MPI_LOCALNRANKS") && env.getInt("MPI_LOCALNRANKS", 1, job.size) == job.size;
    // Hydra names no job; on one host every rank is a child of the same proxy process.
    if (job.single_host) job.job_id = "hydra-" + std::to_string(::getppid());
    if (env.isSet("PMI_FD")) job.launcher_kvs = "pmi-fd:" + std::to_string(env.getInt("PMI_FD", 0, 1 << 20));
  } else if (env.isSet("SLURM_NTASKS") && env.isSet("SLURM_PROCID")) {
    job.launcher = "Slurm";
    job.size = static_cast<int>(env.getInt("SLURM_NTASKS", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("SLURM_PROCID", 0, job.size - 1));
    job.single_host = env.isSet("SLURM_STEP_NUM_NODES") && env.getInt("SLURM_STEP_NUM_NODES", 1, 1 << 20) == 1;
    job.job_id = env.getString("SLURM_JOB_ID") + "." + env.getString("SLURM_STEP_ID");
    job.first_host = firstSlurmHost(env.getString("SLURM_STEP_NODELIST"));
  } else {
    return std::nullopt;
  }
  return job;
}

std::string firstSlurmHost(const std::string& list) {
  const auto bracket = list.find('[');
  const auto comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return list.substr(0, comma);
  // "node[01-04,07]": the prefix and the first number of the range, zero padding kept.
  const auto end = list.find_first_of("-,]", bracket + 1);
  return list.substr(0, bracket) + list.substr(bracket + 1, end - bracket - 1);
}

}  // namespace hora::bootstrap
