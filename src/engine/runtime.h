// Runtime: the Engine's background thread for one process set, and the loop it runs (Note
// [engine cycle]): it takes requests from user threads, sleeps while no rank has work (Note
// [idle engine]), and each cycle lets the Negotiator decide what is ready and the Executor run
// it, fused (fusion.h). It also keeps the stall inspector and the flight record.
//
// Thread safety: enqueue, shutdown, stats and the timeline switches may be called from any
// thread; they meet the engine thread under mutex_ (what it guards is marked HORA_GUARDED_BY,
// checked by clang's -Wthread-safety). Everything else is the engine thread's.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "engine/executor.h"
#include "engine/handle.h"
#include "engine/negotiator.h"
#include "engine/autotune/parameter_manager.h"
#include "engine/submission.h"
#include "engine/timeline.h"
#include "hora/engine.h"

namespace hora::engine {

class Runtime {
 public:
  Runtime(std::unique_ptr<Communicator> comm, const EngineOptions& options);
  ~Runtime();

  const Identity& identity() const { return comm_->identity(); }
  const Communicator& communicator() const { return *comm_; }
  Handle enqueue(Request request, std::function<void(std::exception_ptr)> done) HORA_EXCLUDES(mutex_);
  // Stops the engine thread after telling the other ranks; `why` completes "rank N ..." in their
  // errors (Note [departures]). Idempotent: the first reason stands.
  void shutdown(const std::string& why = "") HORA_EXCLUDES(mutex_);
  EngineStats stats() const HORA_EXCLUDES(mutex_);
  std::vector<TuningRecord> tuningHistory() const HORA_EXCLUDES(mutex_);
  void startTimeline(const std::string& path, bool mark_cycles, bool all_ranks) HORA_EXCLUDES(mutex_);
  void stopTimeline() HORA_EXCLUDES(mutex_);

 private:
  void loop();
  void pinThread();  // on the engine thread, before its first cycle
  // Returns when this rank has something to negotiate or another rank
  // started a cycle (Note [idle engine]).
  void waitUntilSomeRankHasWork();
  // How long an idle engine may sleep: until the next stall check is due.
  std::chrono::milliseconds idleTimeout() const;
  void wakeUp() { doorbell_->ring(); }  // after queueing something for the engine thread
  // kNegotiated: the cycle negotiated in full (it may also have run something).
  enum class CycleResult { kIdle, kWorked, kNegotiated, kStop };
  // One negotiation round and the execution of what it decided.
  CycleResult cycle();
  // Whether the next cycle starts at once after one that ended with `result` (see loop()).
  bool followAtOnce(CycleResult result) const;
  // Moves the queued requests to the Negotiator; returns whether this rank is stopping.
  bool admitQueued();
  // This rank's control vector, with the flags only the Runtime knows.
  ControlVector controlVector(bool stopping) const;
  void addStats(const EngineStats& delta);
  // Runs the ready responses in order, fused; returns how many fused allreduces it ran.
  uint64_t execute(const std::vector<Response>& ready);
  void finish(const std::string& name, std::exception_ptr error, std::vector<int64_t> shape = {});
  void failEverything(std::exception_ptr error);
  // Whether some name waited longer than HORA_STALL_SHUTDOWN_TIME_SECONDS on this rank's clock.
  bool stallLimitPassed() const;
  [[noreturn]] void throwStallShutdown() const;
  void warnStalls();
  // "#41 allreduce 'grad.3' ok, #42 ..." : this rank's last operations, for stall messages.
  std::string recentOperations() const;
  void applyTimelineRequest();
  // Joins the broadcast of the coordinator's parameters and applies them (Note [autotuning]).
  void applyTuning();
  // Tells the autotuner what this cycle allreduced.
  void recordForTuning(const std::vector<Response>& ran);

  std::unique_ptr<Communicator> comm_;
  const EngineOptions options_;
  const int rank_, size_;

  // The state user threads and the engine thread share.
  mutable common::Mutex mutex_;
  std::vector<Submission> queue_ HORA_GUARDED_BY(mutex_);
  // Every name enqueued and not completed yet: a second enqueue of one fails at once (Horovod
  // raises at enqueue, on the rank that made the mistake only).
  std::set<std::string> names_in_flight_ HORA_GUARDED_BY(mutex_);
  size_t held_bytes_ HORA_GUARDED_BY(mutex_) = 0;  // of the allreduces in queue_ queued without waking the engine
  size_t bucket_bytes_ HORA_GUARDED_BY(mutex_);  // HORA_BUCKET_BYTES, or what the autotuner set
  std::vector<TuningRecord> tuning_history_ HORA_GUARDED_BY(mutex_);
  bool stopping_ HORA_GUARDED_BY(mutex_) = false;
  std::string stop_reason_ HORA_GUARDED_BY(mutex_);  // why this rank stops (Note [departures])
  std::exception_ptr fatal_ HORA_GUARDED_BY(mutex_);
  EngineStats stats_ HORA_GUARDED_BY(mutex_);
  struct TimelineRequest {
    std::string path;  // empty: stop
    bool mark_cycles = false, all_ranks = false;
  };
  std::optional<TimelineRequest> timeline_request_ HORA_GUARDED_BY(mutex_);  // applied by the engine thread

  // Engine thread only:
  TunedParameters tuned_;  // what is in force: the options, or what the autotuner set
  std::unique_ptr<ParameterManager> tuner_;  // with HORA_AUTOTUNE only
  uint64_t cycles_run_ = 0;
  Tracer tracer_;
  Negotiator negotiator_;
  Executor executor_;
  std::map<std::string, PendingTable::Clock::time_point> stall_warned_;
  // Flight record: the last operations this rank completed, numbered in completion order.
  std::deque<std::string> recent_;
  uint64_t completed_ = 0;
  std::string departures_;  // set in the cycle that agreed to stop: who left and why

  std::shared_ptr<Doorbell> doorbell_;  // readable while the engine thread has something to pick up
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace hora::engine
