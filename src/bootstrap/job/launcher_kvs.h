// LauncherKvs: the key-value service of the MPI launcher that started this process, the one MPI
// libraries bootstrap through (Note [launcher key-value service]). hora uses it once per process
// to learn where rank 0 serves the rendezvous store and the job's secret, so that
// `mpirun -H a:4,b:4 python train.py` needs no variable set by hand. hora links no MPI: MPICH's
// Hydra is spoken to over its PMI-1 text protocol (pmi_wire_kvs.h), OpenMPI's runtime through
// PMIx, loaded with dlopen (pmix_kvs.h).
//
// Note [launcher key-value service]: rank 0 puts one value, every rank enters a fence (which
// returns when all have, and publishes what was put before it), the others then get rank 0's
// value. Both services only serve processes the launcher started (an inherited socket, PMIx's
// own authentication), which is why the secret may travel through them. Every call has a
// deadline; a service that does not answer in time fails with TimeoutError naming it.
//
// Not thread-safe; one instance per process, used once and then closed (finalized), so that the
// launcher sees a process that joined and left its service properly.
#pragma once

#include <memory>
#include <string>

#include "common/deadline.h"

namespace hora::bootstrap {

class LauncherKvs {
 public:
  virtual ~LauncherKvs() = default;
  // "MPICH's process manager (PMI-1 over PMI_FD)", for messages.
  virtual std::string name() const = 0;
  virtual void put(const std::string& key, const std::string& value, const common::Deadline& deadline) = 0;
  // Publishes this rank's puts and waits for every rank of the job to enter it.
  virtual void fence(const common::Deadline& deadline) = 0;
  virtual std::string get(int rank, const std::string& key, const common::Deadline& deadline) = 0;
};

// The service named by RendezvousOptions::launcher_kvs ("pmi-fd:<fd>" or "pmix"). Throws
// InvalidArgumentError saying what to set instead (HORA_RENDEZVOUS_ADDR, ...) when it cannot be
// reached or loaded.
std::unique_ptr<LauncherKvs> openLauncherKvs(const std::string& spec, int rank, const common::Deadline& deadline);

}  // namespace hora::bootstrap
