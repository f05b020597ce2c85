#include "collectives/flight_recorder.h"

#include <cstdio>

namespace hora::collectives {

void FlightRecorder::start(uint32_t sequence, std::string_view op, size_t bytes) {
  Entry& e = entries_[count_ % kCapacity];
  e = {sequence, std::string(op), bytes, std::chrono::steady_clock::now(), -1};
  ++count_;
}

void FlightRecorder::finish(uint32_t sequence) {
  if (count_ == 0) return;
  Entry& e = entries_[(count_ - 1) % kCapacity];
  if (e.sequence == sequence)
    e.done_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e.started).count();
}

std::string FlightRecorder::describe() const {
  std::string out;
  const size_t first = count_ > kCapacity ? count_ - kCapacity : 0;
  for (size_t i = first; i < count_; ++i) {
    const Entry& e = entries_[i % kCapacity];
    char line[160];
    if (e.done_ms >= 0) {
      std::snprintf(line, sizeof(line), "#%u %s %zu B done in %.2f ms", e.sequence, e.op.c_str(), e.bytes, e.done_ms);
    } else {
      const double running =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e.started).count();
      std::snprintf(line, sizeof(line), "#%u %s %zu B running for %.1f ms", e.sequence, e.op.c_str(), e.bytes, running);
    }
    out += (out.empty() ? "" : "; ") + std::string(line);
  }
  return out.empty() ? "none" : out;
}

}  // namespace hora::collectives
