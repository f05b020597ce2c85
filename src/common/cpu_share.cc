#include "common/cpu_share.h"

#include <sched.h>

#include <algorithm>

namespace hora::common {

namespace {
int usableCores() {
  cpu_set_t cpus;
  return ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
}
}  // namespace

CpuShare::CpuShare() : cores_(usableCores()) {}

CpuShare& CpuShare::process() {
  static CpuShare share;
  return share;
}

void CpuShare::noteLocalRanks(int n) {
  int seen = local_ranks_.load(std::memory_order_relaxed);
  while (n > seen && !local_ranks_.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

CpuShare::Mode CpuShare::decide(int cores, int local_ranks, int running) {
  if (local_ranks * (running + 1) <= cores) return Mode::kBusyPoll;
  if (running == 0) return Mode::kYield;
  return Mode::kBlock;
}

CpuShare::Mode CpuShare::mode() const {
  // Without an engine the thread in a collective is the frontend itself: nothing else runs. With
  // one, a frontend thread that waits for hora also idles the intra-op workers that run its ops.
  const bool computing = engines_.load(std::memory_order_relaxed) > 0 && blocked_.load(std::memory_order_relaxed) == 0;
  const int running = computing ? compute_threads_.load(std::memory_order_relaxed) : 0;
  return decide(cores_, local_ranks_.load(std::memory_order_relaxed), running);
}

}  // namespace hora::common
