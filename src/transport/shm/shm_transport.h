// ShmTransport: the Transport among ranks of one host, over POSIX shared memory.
//
// Every rank owns one segment, its inbox: a header and, for each peer, a ring buffer the peer
// writes into and this rank reads from (Note [shm rings] in the .cc). A receive into scratch
// hands the collective a pointer into the ring itself, so a reduction reads the peer's data
// where the peer wrote it, without copying it out first. Waiting spins briefly (yielding the CPU)
// and then sleeps on a futex in the inbox header that peers bump when they give this rank
// something to do, so ranks oversubscribing the cores do not burn them.
//
// Segments are unlinked as soon as every rank has mapped them: a job killed afterwards leaves
// nothing in /dev/shm. The TCP mesh stays connected beside the rings, carrying no data: a dead
// peer is seen as its closed socket (Note [shm liveness]), and an engine idle in
// waitForIncoming() is woken by a byte on it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "rendezvous/store.h"
#include "transport/tcp/tcp_connect.h"
#include "transport/transport.h"

namespace hora::transport::shm {

struct ShmOptions {
  size_t chunk_bytes = 256 * 1024;             // largest piece handed to a collective at once
  std::chrono::microseconds spin{50};          // retry (yielding) this long before sleeping
  std::string key_prefix;                      // of the store keys, as the TCP mesh's
};

class ShmTransport final : public Transport {
 public:
  // `peers`: the connected TCP mesh of the same ranks, all on this host. Creates this rank's
  // inbox, maps every peer's (names exchanged through `store`) and unlinks its own name once
  // all peers have mapped it.
  ShmTransport(int rank, std::vector<tcp::PeerConnection> peers, const ShmOptions& options,
               rendezvous::Store& store, const common::Deadline& deadline);
  // Says goodbye on every socket and unmaps the segments.
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }
  size_t chunkBytes() const override { return options_.chunk_bytes; }
  std::string describePeer(int rank) const override;
  void run(std::span<Transfer> transfers, const OpTag& tag, const common::Deadline& deadline) override;
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) override;

  struct Inbox;    // a mapped segment (.cc)
  struct Channel;  // one ring buffer in it

 private:
  struct Lane {
    std::vector<Transfer*> queue;
    size_t head = 0;
    bool header_done = false;
    bool idle() const { return head == queue.size(); }
  };
  struct PeerRun {
    Lane send;
    Lane recv;
  };
  bool progressSend(int peer, Lane& lane, const OpTag& tag);
  bool progressRecv(int peer, Lane& lane, const OpTag& tag);
  bool canProgress(const std::vector<PeerRun>& runs, const std::vector<int>& active) const;
  void sleepOnDoorbell(const std::vector<PeerRun>& runs, const std::vector<int>& active,
                       const common::Deadline& deadline);
  void checkPeers(const std::vector<PeerRun>& runs, const std::vector<int>& active, const OpTag& tag);
  bool drainSocket(int peer);  // reads wake-up and goodbye bytes; false once the peer is gone
  Channel& outgoing(int peer) const;  // this rank -> peer, in the peer's inbox
  Channel& incoming(int peer) const;  // peer -> this rank, in this rank's inbox
  void ring(int peer, bool wake_idle);  // wakes `peer` if it sleeps (and, if asked, if it idles)
  [[noreturn]] void fail(Error error);

  const int rank_;
  const ShmOptions options_;
  std::vector<tcp::PeerConnection> peers_;
  std::vector<Inbox*> inboxes_;     // by rank; this rank's own included
  std::vector<uint64_t> written_;   // per peer: this rank's write position in its channel
  std::vector<uint64_t> consumed_;  // per peer: this rank's read position in the peer's channel
  std::vector<bool> departed_;      // said goodbye
  std::vector<bool> closed_;        // socket closed (after a goodbye, or dead)
  common::Deadline::Clock::time_point spin_off_until_{};
  bool oversubscribed_ = false;  // more ranks on this host than cores (Note [shm waiting])
  std::vector<PeerRun> runs_;    // run()'s per-peer lanes, kept between calls
  std::vector<int> active_;
  std::optional<Error> broken_;
};

}  // namespace hora::transport::shm
