// The job bootstrap: who this process is in its job and where the job's rendezvous store is, for
// every way a job starts (Note [job start]). Communicator::fromEnvironment is resolveJob() and
// then connect().
//
// Note [job start]: each way a process can be started is one JobStart, a file of this folder:
// - horarun.h: horarun's HORA_RANK, HORA_SIZE, ... and the store horarun serves; the runners
//   (hora.spark, hora.ray) set the same variables and HORA_SERVE_STORE=1 on rank 0, which then
//   serves the store itself;
// - elastic_join.h: an elastic worker of horarun's (HORA_ELASTIC=1), whose rank and size the
//   driver gives it before each generation;
// - foreign.h: a job of another launcher (mpirun of OpenMPI or MPICH, Slurm's srun:
//   mpi_launch.h; a cluster manager's TF_CONFIG: tf_config.h), whose rank 0 serves the store at
//   an address learned through the launcher's key-value service (launcher_store.h) or derived
//   from the job.
// detectJobStart takes the first that the environment names, in that order: HORA_ELASTIC,
// another launcher's variables when HORA_SIZE is unset, HORA_SERVE_STORE, and else horarun's
// (a single process when HORA_SIZE is unset too). What a process keeps across its communicators
// (the store it serves, ...) is one object, ProcessState (process_state.h).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "bootstrap/job/process_state.h"
#include "common/knobs.h"
#include "hora/identity.h"
#include "hora/options.h"

namespace hora::bootstrap {

// What a communicator made from the environment needs to connect.
struct Job {
  Identity identity;
  RendezvousOptions rendezvous;  // the communicator's own keys in the job's store
  std::string knobs;             // jobKnobs(): what every rank must agree on (Note [knob agreement])
};

// One way a job starts. Reads a snapshot of the environment; identity() and rendezvous() do no
// I/O, join() does what this way needs before a communicator connects.
class JobStart {
 public:
  explicit JobStart(common::Env env) : env_(std::move(env)) {}
  virtual ~JobStart() = default;

  // This process's place as the environment states it, with its hostname (HORA_HOSTNAME, else
  // the system's). InvalidArgumentError naming the variable when one is malformed.
  Identity identity() const;
  // Where the job's store is, as the environment states it (empty options for a job of one);
  // InvalidArgumentError naming the variable to set when it cannot be told.
  virtual RendezvousOptions rendezvous() const = 0;
  // The identity and the rendezvous of this process's next communicator, after the exchange
  // this way of starting needs. The default has none: identity(), and rendezvous() under the
  // communicator's own keys (ProcessState::nextCommunicator).
  virtual std::pair<Identity, RendezvousOptions> join(ProcessState& process,
                                                      const CommunicatorOptions& options) const;

 protected:
  // rank and size, and the local and cross fields (or Identity::kDerive); identity() adds the rest.
  virtual Identity place() const = 0;
  const common::Env& env() const { return env_; }

 private:
  common::Env env_;
};

// The way the environment says this process was started (Note [job start]).
std::unique_ptr<JobStart> detectJobStart(const common::Env& env);

// detectJobStart(env)'s identity() and rendezvous(): the environment's word, no exchange.
Identity identityFrom(const common::Env& env);
RendezvousOptions rendezvousFrom(const common::Env& env);

// Everything Communicator::fromEnvironment needs: the way the job started, joined through this
// process's ProcessState, and the job knobs of `env`.
Job resolveJob(const common::Env& env, const CommunicatorOptions& options);

}  // namespace hora::bootstrap
