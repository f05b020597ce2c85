// TcpTransport: the Transport over one TCP connection per pair of ranks (full mesh).
//
// run() drives every transfer of a set from the calling thread with non-blocking sockets and
// poll(): it writes until the kernel pushes back, reads until nothing is left, retries briefly
// while yielding the CPU, and then sleeps in poll() until a socket is ready or the deadline
// passes (Note [spin, then block] in the .cc). Payloads are framed (frame.h). Peers that the current set does not
// involve are watched for a close too, so a rank that dies is named at once by everyone.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "transport/tcp/tcp_connect.h"
#include "transport/transport.h"

namespace hora::transport::tcp {

class TcpTransport final : public Transport {
 public:
  // spin: how long run() keeps retrying before it sleeps in poll() (Note [spin, then block]).
  TcpTransport(int rank, std::vector<PeerConnection> peers, size_t chunk_bytes,
               std::chrono::microseconds spin = std::chrono::microseconds(0));
  // Says goodbye to every peer (Note [peer liveness]) and closes the connections.
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }
  size_t chunkBytes() const override { return chunk_bytes_; }
  std::string describePeer(int rank) const override;
  void run(std::span<Transfer> transfers, const OpTag& tag,
           const common::Deadline& deadline) override;
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) override;

  // Tests only: the raw socket to `peer`, to inject garbage.
  int socketForTesting(int peer) const { return peers_[static_cast<size_t>(peer)].fd.get(); }

 private:
  struct Lane;
  struct PeerRun;
  bool progressSend(int peer, Lane& lane, const OpTag& tag);
  bool progressRecv(int peer, Lane& lane, const OpTag& tag);
  void checkIdlePeer(int peer, std::vector<bool>& unwatched);
  void validateHeader(int peer, const struct FrameHeader& h, const Transfer& t, const OpTag& tag);
  [[noreturn]] void fail(Error error);
  [[noreturn]] void failTimeout(const std::vector<PeerRun>& runs, const OpTag& tag,
                                const common::Deadline& deadline);

  const int rank_;
  std::vector<PeerConnection> peers_;
  std::vector<bool> departed_;  // peer said goodbye
  const size_t chunk_bytes_;
  const std::chrono::microseconds spin_;
  common::Deadline::Clock::time_point spin_off_until_{};  // Note [spin, then block]
  std::vector<std::vector<std::byte>> scratch_;  // per peer, chunk_bytes_ each, made on demand
  std::optional<Error> broken_;
};

}  // namespace hora::transport::tcp
