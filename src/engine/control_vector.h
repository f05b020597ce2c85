// ControlVector: what each rank contributes to the one allreduce every cycle begins with (Note
// [engine cycle]), and what the ranks agreed after it.
//
// Layout: a byte per response-cache slot (Note [response cache]), then four flag bytes. Every
// byte is 1 for "yes, go on" and 0 for "no", so that one Min allreduce over the ranks answers
// each question at once: a slot's byte stays 1 only when every rank submitted that cached name,
// and a flag drops to 0 as soon as one rank raises it.
//   slot bytes:       1 = this rank submitted the cached name in that slot
//   announce byte:    0 = this rank has new requests to announce (a full negotiation follows)
//   running byte:     0 = this rank is shutting down
//   stall-limit byte: 0 = this rank's clock passed HORA_STALL_SHUTDOWN_TIME_SECONDS
//   retune byte:      0 = this rank (the autotuner's coordinator) has parameters to ship; every
//                     rank joins their broadcast in this cycle (Note [autotuning])
#pragma once

#include <cstdint>
#include <vector>

#include "hora/communicator.h"

namespace hora::engine {

class ControlVector {
 public:
  // For `slots` cache slots: nothing submitted, nothing to announce, running, no stall limit.
  explicit ControlVector(int slots);

  // Before agree(): this rank's contribution.
  void markSubmitted(int slot) { bytes_[static_cast<size_t>(slot)] = 1; }
  void markEverySlotSubmitted();  // a joined rank stands in for every cached name (Note [join])
  void markAnnouncing() { bytes_[announceByte()] = 0; }
  void markStopping() { bytes_[runningByte()] = 0; }
  void markStallLimitPassed() { bytes_[stallByte()] = 0; }
  void markRetuning() { bytes_[retuneByte()] = 0; }

  // The Min allreduce over the ranks; afterwards the accessors below tell what they agreed.
  void agree(Communicator& comm);

  int slots() const { return slots_; }
  bool everyRankSubmitted(int slot) const { return bytes_[static_cast<size_t>(slot)] != 0; }
  bool someRankAnnounces() const { return bytes_[announceByte()] == 0; }
  bool someRankStops() const { return bytes_[runningByte()] == 0; }
  bool someRankPassedStallLimit() const { return bytes_[stallByte()] == 0; }
  bool someRankRetunes() const { return bytes_[retuneByte()] == 0; }

 private:
  size_t announceByte() const { return static_cast<size_t>(slots_); }
  size_t runningByte() const { return static_cast<size_t>(slots_) + 1; }
  size_t stallByte() const { return static_cast<size_t>(slots_) + 2; }
  size_t retuneByte() const { return static_cast<size_t>(slots_) + 3; }

  int slots_;
  std::vector<uint8_t> bytes_;
};

}  // namespace hora::engine
