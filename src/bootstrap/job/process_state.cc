#include "bootstrap/job/process_state.h"

#include <unistd.h>

#include "bootstrap/job/launcher_store.h"
#include "hora/errors.h"

namespace hora::bootstrap {

ProcessState& ProcessState::instance() {
  static ProcessState state;  // destroyed at exit, after main: the store it serves with it
  return state;
}

RendezvousOptions ProcessState::nextCommunicator(RendezvousOptions job, int rank) {
  if (job.serve_store) {
    // It listens on the address the other ranks were told.
    common::MutexLock lock(mutex_);
    if (!server_) {
      try {
        server_ = std::make_unique<rendezvous::TcpStoreServer>(job.address, job.port, job.secret);
      } catch (const Error& e) {
        throw InvalidArgumentError("rank 0 cannot serve the rendezvous store on " + job.address + ":" +
                                   std::to_string(job.port) + " (" + e.what() +
                                   "); rank 0 must run on that host and the port must be free: set "
                                   "HORA_RENDEZVOUS_ADDR / HORA_RENDEZVOUS_PORT");
      }
    }
  }
  // Numbered per process: a second communicator never reads the first's addresses.
  job.announce_key = job.prefix + "started/" + std::to_string(rank);
  job.prefix += "comm" + std::to_string(communicators_++) + "/";
  return job;
}

RendezvousOptions ProcessState::throughLauncher(const RendezvousOptions& job, int rank,
                                                const CommunicatorOptions& options) {
  common::MutexLock lock(mutex_);
  if (!learned_) {
    LearnedRendezvous learned = rendezvousThroughLauncher(job, rank, options.iface, options.timeout);
    if (learned.server) server_ = std::move(learned.server);
    learned_ = learned.rendezvous;
  }
  return *learned_;
}

std::string ProcessState::nextJoinNonce() { return std::to_string(::getpid()) + "." + std::to_string(joins_++); }

std::optional<std::string> ProcessState::tryGetFromDriver(const RendezvousOptions& where, const std::string& key,
                                                          const common::Deadline& deadline) {
  common::MutexLock lock(driver_mutex_);
  try {
    if (!driver_) driver_ = std::make_unique<rendezvous::TcpStore>(where.address, where.port, where.secret, deadline);
    return driver_->tryGet(key, deadline);
  } catch (const Error&) {
    driver_.reset();  // the next call reconnects
    throw;
  }
}

}  // namespace hora::bootstrap
