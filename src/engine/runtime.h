// Runtime: the Engine's background thread and everything it owns (Note [engine cycle]).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/socket.h"
#include "engine/negotiation.h"
#include "engine/timeline.h"
#include "hora/engine.h"
#include "hora/errors.h"

namespace hora {

namespace engine {
// The engine thread's eventfd. Handles share it, so that a thread that waits for (or polls) a
// request the engine holds back (Note [buckets]) can wake the engine; it outlives the Runtime.
class Doorbell {
 public:
  Doorbell();
  int fd() const { return fd_.get(); }
  void ring();
  // Requests are queued but held back; the next wait or poll on any handle rings.
  void hold() { held_.store(true, std::memory_order_release); }
  void release() { held_.store(false, std::memory_order_relaxed); }
  bool held() const { return held_.load(std::memory_order_acquire); }
  void ringIfHeld() {
    if (held_.load(std::memory_order_acquire) && held_.exchange(false)) ring();
  }

 private:
  common::Fd fd_;
  std::atomic<bool> held_{false};
};
}  // namespace engine

// The completion of one request. The error is kept as kind and text, and every reader makes
// its own exception from them: an exception object shared between the engine thread and user
// threads would be released by whichever finishes last, outside any lock.
struct Handle::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;                       // guarded by mutex
  std::optional<Error> failure;            // guarded by mutex
  std::vector<int64_t> output_shape;       // guarded by mutex
  std::function<void(std::exception_ptr)> callback;
  std::shared_ptr<engine::Doorbell> doorbell;  // null for handles that failed at enqueue
  void complete(std::exception_ptr e, std::vector<int64_t> shape = {});
};

namespace engine {

// A handle that has already failed with `e` (after running `done`).
Handle failedHandle(std::exception_ptr e, std::function<void(std::exception_ptr)> done = {});

class Runtime {
 public:
  Runtime(std::unique_ptr<Communicator> comm, const EngineOptions& options);
  ~Runtime();

  const Identity& identity() const { return comm_->identity(); }
  const Communicator& communicator() const { return *comm_; }
  Handle enqueue(Request request, std::function<void(std::exception_ptr)> done);
  void shutdown();
  EngineStats stats() const;
  void startTimeline(const std::string& path, bool mark_cycles, bool all_ranks);
  void stopTimeline();

 private:
  // A request of this rank, from enqueue until its response ran.
  struct Local {
    Request request;
    RequestMeta meta;
    std::shared_ptr<Handle::State> state;
  };

  void loop();
  // Note [idle engine]: returns when this rank has something to negotiate or another rank
  // started a cycle.
  void waitUntilSomeRankHasWork();
  // How long an idle engine may sleep: until the next stall check is due.
  std::chrono::milliseconds idleTimeout() const;
  void wakeUp() { doorbell_->ring(); }  // after queueing something for the engine thread
  enum class CycleResult { kIdle, kWorked, kStop };
  // One negotiation round and the execution of what it decided.
  CycleResult cycle();
  void admit(std::vector<Local> fresh);
  void negotiateInFull(std::vector<Response>& ready, std::vector<std::string>& fully_negotiated);
  // Runs the ready responses; returns how many fused allreduces it ran.
  uint64_t execute(std::vector<Response>& ready);
  void executeAllreduceGroup(const std::vector<const Response*>& group);
  void executeOne(const Response& r);
  void finish(const std::string& name, std::exception_ptr error, std::vector<int64_t> shape = {});
  void failEverything(std::exception_ptr error);
  void warnStalls();
  // "#41 allreduce 'grad.3' ok, #42 ..." : this rank's last operations, for stall messages.
  std::string recentOperations() const;
  void applyTimelineRequest();
  // Timeline helpers: no-ops without a timeline.
  void traceBegin(const std::string& name, std::string_view event, std::string_view args = {});
  void traceEnd(const std::string& name);

  std::unique_ptr<Communicator> comm_;
  const EngineOptions options_;
  const int rank_, size_;

  mutable std::mutex mutex_;  // guards queue_, stopping_, fatal_, stats_
  std::vector<Local> queue_;
  size_t held_bytes_ = 0;  // of the allreduces in queue_ queued without waking the engine
  bool stopping_ = false;
  std::exception_ptr fatal_;
  EngineStats stats_;
  struct TimelineRequest {
    std::string path;  // empty: stop
    bool mark_cycles = false, all_ranks = false;
  };
  std::optional<TimelineRequest> timeline_request_;  // applied by the engine thread

  // Engine thread only:
  std::map<std::string, Local> in_flight_;   // by name
  std::vector<Local> duplicates_;            // second submissions of an in-flight name
  std::map<int, std::string> cached_waiting_;  // cache slot -> name, this rank submitted it
  std::vector<std::string> to_announce_;     // in-flight names for the next full negotiation
  std::vector<RequestMeta> dup_announce_;    // duplicate submissions to report to every rank
  PendingTable table_;
  ResponseCache cache_;
  std::vector<std::byte> fusion_;
  std::map<std::string, PendingTable::Clock::time_point> stall_warned_;
  std::unique_ptr<Timeline> timeline_;
  // Flight record: the last operations this rank completed, numbered in completion order.
  std::deque<std::string> recent_;
  uint64_t completed_ = 0;

  std::shared_ptr<Doorbell> doorbell_;  // readable while the engine thread has something to pick up
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace engine
}  // namespace hora
