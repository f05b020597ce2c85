#include "transport/peer_group.h"

#include <sched.h>

#include <cerrno>
#include <cstring>

#include "common/cpu_share.h"
#include "hora/errors.h"

namespace hora::transport {

// A yield that returns later than this gave the core away for a time slice.
constexpr auto kSlowYield = std::chrono::microseconds(200);

bool Spinner::again() {
  using Mode = common::CpuShare::Mode;
  if (wait_began_ == Clock::time_point{}) wait_began_ = Clock::now();
  const Mode mode = common::CpuShare::process().mode();
  if (mode == Mode::kBlock || yield_for_.count() <= 0 || !history_.worthSpinning()) return false;
  if (mode == Mode::kBusyPoll && polls_ < busy_polls_) {
    ++polls_;
    __builtin_ia32_pause();
    return true;
  }
  const auto now = Clock::now();
  if (now < yield_off_until_) return false;
  if (yield_until_ == Clock::time_point{}) yield_until_ = wait_began_ + yield_for_;
  if (now >= yield_until_) return false;
  ::sched_yield();
  if (mode == Mode::kBusyPoll && Clock::now() - now > kSlowYield) yield_off_until_ = Clock::now() + std::chrono::seconds(1);
  return true;
}

void runGroups(std::span<PeerGroup* const> groups, std::span<Transfer> transfers, const OpTag& tag,
               const common::Deadline& deadline, Spinner& spinner) {
  for (PeerGroup* g : groups) g->begin(transfers);
  std::vector<pollfd> fds;
  std::vector<size_t> starts(groups.size() + 1);
  while (true) {
    bool progressed = false, pending = false;
    for (PeerGroup* g : groups) {
      progressed |= g->advance(tag);
      pending |= g->pending();
    }
    if (progressed) spinner.progressed();
    if (!pending) return;
    if (progressed) continue;
    if (spinner.again()) continue;
    if (deadline.expired()) {
      std::string owed;
      for (PeerGroup* g : groups) owed += g->owed();
      throw TimeoutError("timed out after " + std::to_string(deadline.timeout().count()) + " ms in " +
                         std::string(tag.name) + " #" + std::to_string(tag.sequence) + owed);
    }
    fds.clear();
    bool can_move = false;
    for (size_t i = 0; i < groups.size(); ++i) {
      starts[i] = fds.size();
      // Every group arms its wake-up even when an earlier one can move: finishWait disarms.
      can_move |= !groups[i]->prepareWait(fds);
    }
    starts[groups.size()] = fds.size();
    const int n = can_move ? 0 : ::poll(fds.data(), fds.size(), deadline.pollTimeoutMs());
    if (n < 0 && errno != EINTR) throw InternalError(std::string("poll failed: ") + std::strerror(errno));
    for (size_t i = 0; i < groups.size(); ++i)
      groups[i]->finishWait(std::span<const pollfd>(fds).subspan(starts[i], starts[i + 1] - starts[i]), tag);
  }
}

bool waitIdle(std::span<PeerGroup* const> groups, std::chrono::milliseconds timeout, int wake_fd) {
  const auto deadline = common::Deadline::after(timeout);
  std::vector<pollfd> fds;
  std::vector<size_t> starts(groups.size() + 1);
  while (true) {
    fds.clear();
    bool arrived = false;
    for (size_t i = 0; i < groups.size(); ++i) {
      starts[i] = fds.size();
      arrived |= !groups[i]->prepareIdle(fds);
    }
    starts[groups.size()] = fds.size();
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    const int n = arrived ? 0 : ::poll(fds.data(), fds.size(), deadline.pollTimeoutMs());
    bool woken = arrived;
    for (size_t i = 0; i < groups.size(); ++i)
      woken |= groups[i]->finishIdle(std::span<const pollfd>(fds).subspan(starts[i], starts[i + 1] - starts[i]));
    if (woken || (wake_fd >= 0 && n > 0 && fds.back().revents != 0)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 && deadline.expired()) return false;
  }
}


}  // namespace hora::transport
