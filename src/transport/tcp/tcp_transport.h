// TcpTransport: the Transport over one TCP connection per pair of ranks (full mesh).
//
// run() drives every transfer of a set from the calling thread with non-blocking sockets and
// poll(): it writes until the kernel pushes back, reads until nothing is left, retries briefly
// while yielding the CPU, and then sleeps in poll() until a socket is ready or the deadline
// passes (Note [spin, then block]). Payloads are framed (frame.h). Peers that the current set
// does not involve are watched for a close too, so a rank that dies is named at once by everyone.
// It is also the TCP half of a HybridTransport (Note [mixed transfer sets]): then the entries of
// the peers on this host are empty and it serves only the others.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "transport/liveness/silent_peers.h"
#include "transport/peer_group.h"
#include "transport/peer_lanes.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tcp_connect.h"
#include "transport/transport.h"

namespace hora::transport::tcp {

class TcpTransport final : public Transport, public PeerGroup {
 public:
  // `peers`: one entry per rank; this rank's and those of peers served elsewhere are empty.
  // spin: how long run() keeps retrying before it sleeps in poll() (Note [spin, then block]).
  // silent: the heartbeat's verdicts (Note [heartbeat]), or null without one.
  TcpTransport(int rank, std::vector<PeerConnection> peers, size_t chunk_bytes,
               std::chrono::microseconds spin = std::chrono::microseconds(0),
               std::shared_ptr<const SilentPeers> silent = nullptr);
  // Says goodbye to every peer (Note [peer liveness]) and closes the connections.
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }
  size_t chunkBytes() const override { return chunk_bytes_; }
  std::string describePeer(int rank) const override;
  void run(std::span<Transfer> transfers, const OpTag& tag,
           const common::Deadline& deadline) override;
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) override;
  bool departed(int peer) const override { return serves(peer) && departed_[static_cast<size_t>(peer)]; }

  // PeerGroup
  bool serves(int peer) const override;
  void begin(std::span<Transfer> transfers) override;
  bool advance(const OpTag& tag) override;
  bool pending() const override;
  bool prepareWait(std::vector<pollfd>& fds) override;
  void finishWait(std::span<const pollfd> fds, const OpTag& tag) override;
  std::string owed() const override;
  bool prepareIdle(std::vector<pollfd>& fds) override;
  bool finishIdle(std::span<const pollfd> fds) override;
  void breakWith(const Error& error) override { broken_ = error; }

  // Tests only: the raw socket to `peer`, to inject garbage.
  int socketForTesting(int peer) const { return peers_[static_cast<size_t>(peer)].fd.get(); }

 private:
  struct Lane : LaneBase {
    FrameHeader header;
    size_t header_done = 0;
    size_t scratch_fill = 0;
    bool want_io = false;  // blocked on the socket (not on `ready`)
  };
  bool progressSend(int peer, Lane& lane, const OpTag& tag);
  bool progressRecv(int peer, Lane& lane, const OpTag& tag);
  // Where the next payload bytes of `t` go: its destination, or the peer's scratch chunk.
  std::span<std::byte> receiveSpace(int peer, const Lane& lane, const Transfer& t);
  // Accounts `bytes` of payload read into receiveSpace; a full scratch chunk goes to on_chunk.
  void deliver(int peer, Lane& lane, Transfer& t, size_t bytes);
  // One recvmsg: the bytes read, 0 when the socket has nothing now; throws on a close or error.
  ssize_t receive(int peer, msghdr& msg, const Transfer& t, const OpTag& tag);
  void checkIdlePeer(int peer, const OpTag& tag);
  void validateHeader(int peer, const FrameHeader& h, const Transfer& t, const OpTag& tag);
  [[noreturn]] void fail(Error error);
  // A socket that closed or failed under `tag`: `what_the_socket_says`, unless the heartbeat shut
  // it (then its verdict, and where this rank was).
  [[noreturn]] void failConnection(const OpTag& tag, std::string what_the_socket_says);

  const int rank_;
  std::vector<PeerConnection> peers_;
  std::vector<bool> departed_;  // peer said goodbye
  const size_t chunk_bytes_;
  const std::chrono::microseconds spin_;
  common::Deadline::Clock::time_point spin_off_until_{};  // Note [spin, then block]
  SpinHistory spin_history_;
  std::vector<std::vector<std::byte>> scratch_;  // per peer, chunk_bytes_ each, made on demand
  PeerLanes<Lane> lanes_;        // the current transfer set's
  std::vector<bool> unwatched_;  // idle peers holding data of a later collective (Note [peer liveness])
  std::vector<int> polled_;      // the peer of each descriptor prepareWait/prepareIdle added
  std::shared_ptr<const SilentPeers> silent_;
  std::optional<Error> broken_;
};

}  // namespace hora::transport::tcp
