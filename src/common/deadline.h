// Deadline: a point on the steady clock after which a blocking wait gives up.
#pragma once

#include <algorithm>
#include <chrono>

namespace hora::common {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::milliseconds timeout) {
    return Deadline(Clock::now() + timeout, timeout);
  }

  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, rounded up and clamped to [0, INT_MAX], as poll() wants them.
  int pollTimeoutMs() const {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
  }
  std::chrono::milliseconds remaining() const {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(at_ - Clock::now()));
  }
  // The timeout this deadline was made from, for error messages ("after 30 s").
  std::chrono::milliseconds timeout() const { return timeout_; }
  Clock::time_point at() const { return at_; }

 private:
  Deadline(Clock::time_point at, std::chrono::milliseconds timeout) : at_(at), timeout_(timeout) {}
  Clock::time_point at_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hora::common
