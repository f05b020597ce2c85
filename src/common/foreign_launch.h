// Jobs started without horarun: by OpenMPI's or MPICH's mpirun, or by Slurm's srun. Each rank
// finds its rank and size in that launcher's environment; rank 0 serves the rendezvous store
// itself, at an address the others can compute (Note [foreign launch]).
//
// Note [foreign launch]: when neither HORA_RENDEZVOUS_ADDR nor HORA_RENDEZVOUS_PORT is set and
// the launcher offers its key-value service (PMI-1 over PMI_FD for MPICH's Hydra, PMIx for
// OpenMPI), rank 0 serves the store on a free port with a random secret and the others learn
// both through that service (bootstrap/store_through_launcher.h). Otherwise:
// the store's address is HORA_RENDEZVOUS_ADDR if set, else 127.0.0.1 when
// every rank is on one host, else (Slurm) the first host of the step, where srun puts rank 0.
// Its port is HORA_RENDEZVOUS_PORT if set, else derived from the launcher's job id (OpenMPI's
// jobid, Slurm's job and step ids, or for a one-host MPICH job the pid of the process that
// started the ranks), so that two jobs on one host do not collide. The secret is HORA_SECRET if
// set (mpirun -x HORA_SECRET); otherwise it is derived from the job id, which only keeps
// separate jobs apart, and a warning says so.
#pragma once

#include <optional>
#include <string>

#include "common/knobs.h"
#include "hora/options.h"

namespace hora::common {

struct ForeignLaunch {
  std::string launcher;  // "OpenMPI", "MPICH" or "Slurm"
  int rank = 0, size = 1;
  bool single_host = false;
  std::string job_id;      // empty when the launcher gives none
  std::string first_host;  // Slurm: the step's first host
  std::string launcher_kvs;  // "pmi-fd:<fd>", "pmix", or "" (RendezvousOptions::launcher_kvs)
};

// The launcher that started this process, when no HORA_SIZE is set; nullopt when none is known.
std::optional<ForeignLaunch> detectForeignLaunch(const Env& env);

// The rendezvous for such a job (Note [foreign launch]); serve_store is set on rank 0. Throws
// InvalidArgumentError naming the variable to set when no address or port can be derived.
RendezvousOptions foreignRendezvous(const Env& env, const ForeignLaunch& job);

// "node[01-04],gpu7" -> "node01": the first host of a Slurm host list.
std::string firstSlurmHost(const std::string& list);

}  // namespace hora::common
