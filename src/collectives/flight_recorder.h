// FlightRecorder: the last collectives of one communicator, with their sequence numbers, kept so
// that a failure can say where each rank was (c10d's flight recorder, in small).
//
// Every error a collective raises carries this rank's recent history, and the failure report
// (Note [failure reports]) carries every reporting rank's, so a rank that fell out of step (one
// collective behind, or in another collective) is visible in the message. Single-threaded, like
// the Communicator that owns it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace hora::collectives {

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 8;

  void start(uint32_t sequence, std::string_view op, size_t bytes);
  void finish(uint32_t sequence);
  // "#12 allreduce 4096 B done in 0.31 ms; #13 broadcast 8 B running for 3000.2 ms"
  std::string describe() const;

 private:
  struct Entry {
    uint32_t sequence = 0;
    std::string op;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point started;
    double done_ms = -1;  // -1: still running
  };
  std::array<Entry, kCapacity> entries_{};
  size_t count_ = 0;  // entries recorded so far (the last kCapacity are kept)
};

}  // namespace hora::collectives
