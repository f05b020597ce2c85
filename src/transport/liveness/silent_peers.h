// SilentPeers: the peers the heartbeat (heartbeat.h) has declared dead, shared between its thread,
// which writes, and the transports of one connection, which read (Note [heartbeat]).
//
// A transport that finds a peer's socket closed, or that is blocked while some peer is declared,
// fails with verdictFor()/anyVerdict() instead of its own guess: the heartbeat shut that socket
// itself, so "the peer closed its connection" would name the wrong cause.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hora::transport {

class SilentPeers {
 public:
  explicit SilentPeers(int size) : verdicts_(static_cast<size_t>(size)) {}

  // Records why `peer` is taken for dead; the first verdict per peer stays.
  void declare(int peer, std::string verdict) {
    std::lock_guard lock(mu_);
    auto& slot = verdicts_[static_cast<size_t>(peer)];
    if (slot) return;
    slot = std::move(verdict);
    if (first_ < 0) first_ = peer;
    any_.store(true, std::memory_order_release);
  }

  // Cheap enough for every wait: one atomic load.
  bool any() const { return any_.load(std::memory_order_acquire); }

  std::optional<std::string> verdictFor(int peer) const {
    if (!any()) return std::nullopt;
    std::lock_guard lock(mu_);
    return verdicts_[static_cast<size_t>(peer)];
  }

  // The first declared peer's verdict, or nothing.
  std::optional<std::string> anyVerdict() const {
    if (!any()) return std::nullopt;
    std::lock_guard lock(mu_);
    return verdicts_[static_cast<size_t>(first_)];
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::optional<std::string>> verdicts_;  // by rank
  int first_ = -1;
  std::atomic<bool> any_{false};
};

}  // namespace hora::transport
