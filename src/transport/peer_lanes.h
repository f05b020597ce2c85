// PeerLanes: one run's transfers sorted by peer and direction, the bookkeeping both transports
// share. A Lane holds the transfers to (or from) one peer in the order given, `head` being the
// one in progress; each transport derives its Lane from LaneBase and adds its own progress state.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace hora::transport {

struct LaneBase {
  std::vector<Transfer*> queue;
  size_t head = 0;
  bool idle() const { return head == queue.size(); }
};

template <typename Lane>
class PeerLanes {
 public:
  struct Pair {
    Lane send;
    Lane recv;
    bool idle() const { return send.idle() && recv.idle(); }
  };

  explicit PeerLanes(size_t peers) : pairs_(peers) {}

  // Starts a run: queues the transfers whose peer `serves(peer)` accepts (Note [transfer sets]).
  // The queues keep their memory, so a small collective allocates nothing.
  template <typename Serves>
  void assign(std::span<Transfer> transfers, Serves serves) {
    for (Pair& pair : pairs_) {
      reset(pair.send);
      reset(pair.recv);
    }
    for (Transfer& t : transfers) {
      if (!serves(t.peer)) continue;
      Pair& pair = pairs_[static_cast<size_t>(t.peer)];
      (t.kind == Transfer::Kind::kSend ? pair.send : pair.recv).queue.push_back(&t);
    }
    active_.clear();
    for (size_t p = 0; p < pairs_.size(); ++p) {
      if (!pairs_[p].idle()) active_.push_back(static_cast<int>(p));
    }
  }

  // The peers this run involves, ascending.
  const std::vector<int>& active() const { return active_; }
  Pair& operator[](int peer) { return pairs_[static_cast<size_t>(peer)]; }
  const Pair& operator[](int peer) const { return pairs_[static_cast<size_t>(peer)]; }

  bool pending() const {
    for (int p : active_) {
      if (!(*this)[p].idle()) return true;
    }
    return false;
  }

  // Calls step(peer, pair) for each active peer; true when any step moved something.
  template <typename Step>
  bool advance(Step step) {
    bool progressed = false;
    for (int p : active_) progressed |= step(p, (*this)[p]);
    return progressed;
  }

 private:
  static void reset(Lane& lane) {
    std::vector<Transfer*> queue = std::move(lane.queue);
    queue.clear();
    lane = Lane{};
    lane.queue = std::move(queue);
  }

  std::vector<Pair> pairs_;
  std::vector<int> active_;
};

}  // namespace hora::transport
