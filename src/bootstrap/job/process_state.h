// ProcessState: what the bootstrap keeps for the life of the process, across its communicators
// and elastic generations (Note [job start] in job.h). There is one, instance().
//
// - The store this process serves (rank 0 of a job no horarun serves). It outlives every
//   communicator: the other ranks' communicators may still use it after this one's are gone.
// - The rendezvous learned through the MPI launcher's key-value service: the exchange is one
//   fence, so it happens once and later communicators reuse its answer.
// - How many communicators this process made (each gets its own keys; every rank makes them in
//   the same order) and how many elastic joins (each join's nonce is new, so an answer to an old
//   join is never taken for the new one).
// - The connection to the elastic driver's store that hora::elastic::hostUpdates asks every
//   few steps.
//
// Thread-safe. The launcher exchange holds mutex_ while it waits (up to the timeout), as every
// rank's first communicator must get the one answer.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "common/deadline.h"
#include "common/thread_annotations.h"
#include "hora/options.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::bootstrap {

class ProcessState {
 public:
  static ProcessState& instance();

  // `job` under the keys of this process's next communicator; on rank 0 with job.serve_store,
  // serves the store first (at job's address and port; InvalidArgumentError naming the
  // variables to set when it cannot).
  RendezvousOptions nextCommunicator(RendezvousOptions job, int rank);

  // The job's rendezvous learned through the launcher's key-value service
  // (rendezvousThroughLauncher in launcher_store.h), the first call's answer every time.
  RendezvousOptions throughLauncher(const RendezvousOptions& job, int rank, const CommunicatorOptions& options);

  // A nonce no earlier join of this process used.
  std::string nextJoinNonce();

  // The value of `key` in the elastic driver's store at `where`, over one connection kept for
  // the process (reconnected after an error, which is rethrown).
  std::optional<std::string> tryGetFromDriver(const RendezvousOptions& where, const std::string& key,
                                              const common::Deadline& deadline);

 private:
  ProcessState() = default;

  common::Mutex mutex_;
  std::unique_ptr<rendezvous::TcpStoreServer> server_ HORA_GUARDED_BY(mutex_);
  std::optional<RendezvousOptions> learned_ HORA_GUARDED_BY(mutex_);
  std::atomic<int> communicators_{0};
  std::atomic<int> joins_{0};

  common::Mutex driver_mutex_;  // apart from mutex_: never waits behind the launcher exchange
  std::unique_ptr<rendezvous::TcpStore> driver_ HORA_GUARDED_BY(driver_mutex_);
};

}  // namespace hora::bootstrap
