// HybridTransport: the Transport of a communicator whose ranks span hosts: shared memory to the
// ranks of this host, TCP to the others (Note [mixed transfer sets] in peer_group.h).
//
// Each transfer goes to the half that serves its peer; one run() drives both halves, so a
// pipeline can receive over one and forward over the other chunk by chunk, and blocks in one
// poll() over both (shared-memory peers wake it with a byte on their socket).
#pragma once

#include <memory>
#include <optional>

#include "hora/errors.h"
#include "transport/peer_group.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace hora::transport::hybrid {

class HybridTransport final : public Transport {
 public:
  // Both halves span the whole communicator (rank numbers are the communicator's); `local`
  // serves the ranks of this host, `remote` every other.
  HybridTransport(std::unique_ptr<shm::ShmTransport> local, std::unique_ptr<tcp::TcpTransport> remote,
                  std::chrono::microseconds spin);

  int rank() const override { return local_->rank(); }
  int size() const override { return local_->size(); }
  size_t chunkBytes() const override { return local_->chunkBytes(); }
  std::string describePeer(int rank) const override;
  void run(std::span<Transfer> transfers, const OpTag& tag, const common::Deadline& deadline) override;
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) override;
  bool departed(int peer) const override {
    return local_->serves(peer) ? local_->departed(peer) : remote_->departed(peer);
  }

 private:
  std::unique_ptr<shm::ShmTransport> local_;
  std::unique_ptr<tcp::TcpTransport> remote_;
  PeerGroup* const groups_[2];
  const std::chrono::microseconds spin_;
  common::Deadline::Clock::time_point spin_off_until_{};
  SpinHistory spin_history_;
  std::optional<Error> broken_;
};

}  // namespace hora::transport::hybrid
