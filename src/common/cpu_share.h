// CpuShare: whether a hora thread that waits may keep a core busy, decided from what the host
// has and what this process is doing right now (Note [who may spin]).
#pragma once

#include <atomic>

namespace hora::common {

// Note [who may spin]: a waiting thread answers faster when it polls than when it sleeps (a
// futex or poll() wake-up costs tens of microseconds on a VM), but every microsecond it polls
// is taken from some other thread when the host's threads outnumber its cores. Training is that
// case: each rank runs its compute threads and hora's engine thread, and during the backward
// pass the engine waits for peers while the compute threads want every core. So a wait may
//   - busy-poll (then yield) when every rank of the host could run its compute threads that are
//     still running and one hora thread at once:   local_ranks * (running + 1) <= cores;
//   - yield only, when no compute thread of this process runs (the frontend waits for hora, or
//     there is no frontend): the host's threads are then hora's own, and a yield hands the core
//     to the peer that is behind;
//   - not spin at all otherwise: it sleeps at once, and the compute threads keep the cores.
// "running" = the compute threads the frontend declared (setComputeThreads, e.g. torch's
// intra-op threads; 1 by default), or none while a frontend thread is blocked in a hora wait
// (FrontendWait): the intra-op workers only run inside the ops of the thread that calls them, so
// they idle while it waits. Ranks of a host are assumed alike, as data-parallel ranks are.
class CpuShare {
 public:
  enum class Mode { kBlock, kYield, kBusyPoll };

  static CpuShare& process();

  Mode mode() const;
  // The rule of Note [who may spin], for `running` compute threads per rank.
  static Mode decide(int cores, int local_ranks, int running);
  int cores() const { return cores_; }

  void setComputeThreads(int n) { compute_threads_.store(n < 1 ? 1 : n, std::memory_order_relaxed); }
  int computeThreads() const { return compute_threads_.load(std::memory_order_relaxed); }
  // The ranks of this host, as the largest communicator of this process has them.
  void noteLocalRanks(int n);
  // Engines alive in this process (+1 / -1). Without one, the thread in a collective is the
  // frontend itself, so no compute thread runs beside it.
  void noteEngine(int delta) { engines_.fetch_add(delta, std::memory_order_relaxed); }

  // While alive, the calling frontend thread counts as blocked in hora.
  class FrontendWait {
   public:
    FrontendWait() { process().blocked_.fetch_add(1, std::memory_order_relaxed); }
    ~FrontendWait() { process().blocked_.fetch_sub(1, std::memory_order_relaxed); }
    FrontendWait(const FrontendWait&) = delete;
    FrontendWait& operator=(const FrontendWait&) = delete;
  };

 private:
  CpuShare();
  const int cores_;
  std::atomic<int> compute_threads_{1};
  std::atomic<int> local_ranks_{1};
  std::atomic<int> blocked_{0};
  std::atomic<int> engines_{0};
};

}  // namespace hora::common
