// ShmTransport: the Transport among ranks of one host, over POSIX shared memory.
//
// Every rank owns one segment, its inbox: a header and, for each peer, a ring buffer the peer
// writes into and this rank reads from (Note [shm rings] in the .cc). A receive into scratch
// hands the collective a pointer into the ring itself, so a reduction reads the peer's data
// where the peer wrote it, without copying it out first. Waiting spins briefly (yielding the CPU)
// and then sleeps on a futex in the inbox header that peers bump when they give this rank
// something to do, so waiting ranks do not burn cores that training threads want.
//
// Segments are unlinked as soon as every rank has mapped them: a job killed afterwards leaves
// nothing in /dev/shm. The TCP mesh stays connected beside the rings, carrying no data: a dead
// peer is seen as its closed socket (Note [shm liveness]), and an engine idle in
// waitForIncoming() is woken by a byte on it.
//
// It serves the `members` of a communicator, the ranks of this host: all of them when the job
// runs on one host, or, as the shared-memory half of a HybridTransport, some (Note [mixed
// transfer sets]; then it sleeps in the hybrid's poll() and its peers wake it with a byte).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hora/errors.h"
#include "hora/options.h"
#include "rendezvous/store.h"
#include "transport/liveness/silent_peers.h"
#include "transport/peer_group.h"
#include "transport/peer_lanes.h"
#include "transport/tcp/tcp_connect.h"
#include "transport/transport.h"

namespace hora::transport::shm {

// Built from CommunicatorOptions, whose defaults (the knob registry's) it takes.
struct ShmOptions {
  size_t chunk_bytes = CommunicatorOptions{}.chunk_bytes;  // largest piece handed to a collective at once
  size_t inbox_bytes = CommunicatorOptions{}.shm_inbox_bytes;  // this rank's rings together (Note [ring depth])
  std::chrono::microseconds spin = CommunicatorOptions{}.shm_spin;  // retry (yielding) this long before sleeping
  std::string key_prefix;  // of the store keys, as the TCP mesh's
};

// The bytes of each ring in an inbox of a communicator with `members` ranks on this host: an even,
// 16-aligned share of options.inbox_bytes per peer, and at least 4 chunks and 4 KiB (Note [ring
// depth] in the .cc). Every member computes the same from the same options.
size_t ringBytes(const ShmOptions& options, int members);

struct Inbox;    // a mapped segment (inbox.h)
struct Channel;  // one ring buffer in it

class ShmTransport final : public Transport, public PeerGroup {
 public:
  // `peers`: the connected TCP mesh, one entry per rank of the communicator (empty for this rank
  // and for ranks that are not members). `members`: the ranks on this host, this one included,
  // ascending. Creates this rank's inbox, maps every member's (names exchanged through `store`)
  // and unlinks its own name once all members have mapped it.
  // `silent`: the heartbeat's verdicts (Note [heartbeat]), or null without one.
  ShmTransport(int rank, std::vector<tcp::PeerConnection> peers, std::vector<int> members,
               const ShmOptions& options, rendezvous::Store& store, const common::Deadline& deadline,
               std::shared_ptr<const SilentPeers> silent = nullptr);
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


 private:
  struct Lane : LaneBase {
    bool header_done = false;
  };
  bool progressSend(int peer, Lane& lane, const OpTag& tag);
  bool progressRecv(int peer, Lane& lane, const OpTag& tag);
  bool canProgress() const;
  void sleepOnDoorbell(const common::Deadline& deadline);
  void checkPeers(const OpTag& tag);
  bool drainSocket(int peer);  // reads wake-up and goodbye bytes; false once the peer is gone
  Channel& outgoing(int peer) const;  // this rank -> peer, in the peer's inbox
  Channel& incoming(int peer) const;  // peer -> this rank, in this rank's inbox
  void ring(int peer, bool wake_idle);  // wakes `peer` if it sleeps (and, if asked, if it idles)
  [[noreturn]] void fail(Error error);

  const int rank_;
  const ShmOptions options_;
  std::vector<tcp::PeerConnection> peers_;
  const std::vector<int> members_;
  std::vector<int> slot_;           // by rank: its index among the members, or -1
  std::vector<Inbox*> inboxes_;     // by rank (members only); this rank's own included
  std::vector<uint64_t> written_;   // per peer: this rank's write position in its channel
  std::vector<uint64_t> consumed_;  // per peer: this rank's read position in the peer's channel
  std::vector<bool> departed_;      // said goodbye
  std::vector<bool> closed_;        // socket closed (after a goodbye, or dead)
  common::Deadline::Clock::time_point spin_off_until_{};
  SpinHistory spin_history_;     // Note [spin, then block]
  PeerLanes<Lane> lanes_;        // the current transfer set's
  std::vector<int> polled_;      // the peer of each descriptor prepareWait/prepareIdle added
  std::shared_ptr<const SilentPeers> silent_;
  std::optional<Error> broken_;
};

}  // namespace hora::transport::shm
