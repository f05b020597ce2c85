// Jobs started without horarun: by OpenMPI's or MPICH's mpirun, by Slurm's srun, or by a cluster
// manager that sets TensorFlow's TF_CONFIG (Kubeflow's TFJob, ...). Each rank finds its rank and
// size in that launcher's environment; rank 0 serves the rendezvous store itself, at an address
// the others can compute (Note [foreign launch]).
//
// Note [foreign launch]: when neither HORA_RENDEZVOUS_ADDR nor HORA_RENDEZVOUS_PORT is set and
// the launcher offers its key-value service (PMI-1 over PMI_FD for MPICH's Hydra, PMIx for
// OpenMPI), rank 0 serves the store on a free port with a random secret and the others learn
// both through that service (bootstrap/job/launcher_store.h). Otherwise:
// the store's address is HORA_RENDEZVOUS_ADDR if set, else 127.0.0.1 when
// every rank is on one host, else (Slurm) the first host of the step, where srun puts rank 0,
// or (TF_CONFIG) the host of rank 0's entry in the cluster. Its port is HORA_RENDEZVOUS_PORT if
// set, else (TF_CONFIG) the port of rank 0's entry, else derived from the launcher's job id (OpenMPI's
// jobid, Slurm's job and step ids, or for a one-host MPICH job the pid of the process that
// started the ranks), so that two jobs on one host do not collide. The secret is HORA_SECRET if
// set (mpirun -x HORA_SECRET); otherwise it is derived from the job id, which only keeps
// separate jobs apart, and a warning says so.
#pragma once

#include <string>
#include <utility>

#include "bootstrap/job/job.h"
#include "common/knobs.h"
#include "hora/options.h"

namespace hora::bootstrap {

// What another launcher's environment says (mpi_launch.h, tf_config.h).
struct ForeignLaunch {
  std::string launcher;  // "OpenMPI", "MPICH", "Slurm" or "TF_CONFIG"
  int rank = 0, size = 1;
  bool single_host = false;
  std::string job_id;      // empty when the launcher gives none
  std::string first_host;  // Slurm: the step's first host; TF_CONFIG: rank 0's host
  int first_port = 0;      // TF_CONFIG: rank 0's port, where it serves the store; 0: none given
  std::string launcher_kvs;  // "pmi-fd:<fd>", "pmix", or "" (RendezvousOptions::launcher_kvs)
};

// A job of another launcher: rank and size are its, the local and cross fields derived from the
// hostnames; join() learns the store through the launcher's key-value service when it has one.
class ForeignStart : public JobStart {
 public:
  ForeignStart(common::Env env, ForeignLaunch job) : JobStart(std::move(env)), job_(std::move(job)) {}
  RendezvousOptions rendezvous() const override;
  std::pair<Identity, RendezvousOptions> join(ProcessState& process, const CommunicatorOptions& options) const override;

 protected:
  Identity place() const override;

 private:
  ForeignLaunch job_;
};

// The rendezvous for such a job (Note [foreign launch]); serve_store is set on rank 0. Throws
// InvalidArgumentError naming the variable to set when no address or port can be derived.
RendezvousOptions foreignRendezvous(const common::Env& env, const ForeignLaunch& job);

}  // namespace hora::bootstrap
