// Timeline: a Chrome trace-event file (chrome://tracing, Perfetto) of what the engine does.
//
// One row ("thread") per tensor name, one process per rank: NEGOTIATE_<OP> from when this rank
// took the request in until every rank had it (with a mark as each rank's request is seen),
// QUEUE until execution starts, then MEMCPY_IN_FUSION_BUFFER, the collective (its args name the
// algorithm and transport) and MEMCPY_OUT_FUSION_BUFFER. CYCLE_START marks on their own row when
// asked for.
//
// The engine thread formats events and hands them to a writer thread ("hora-timeline"), so disk
// I/O never stalls a cycle. The file is a JSON array whose elements are written with their
// separator first, so a file cut short by a crash lacks only the closing bracket, which trace
// viewers accept; a clean stop writes it. Methods are for the engine thread only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "hora/types.h"

namespace hora::engine {

class Timeline {
 public:
  // Throws InvalidArgumentError naming the path when it cannot be created.
  Timeline(const std::string& path, int rank, bool mark_cycles);
  ~Timeline();  // drains the queue, closes the array

  void begin(const std::string& tensor, std::string_view event, std::string_view args_json = {});
  void end(const std::string& tensor);
  void mark(const std::string& tensor, std::string_view event);
  void cycleStart();

 private:
  int laneOf(const std::string& tensor);
  void emit(std::string event);
  void writerLoop();
  int64_t now() const;

  const int rank_;
  const bool mark_cycles_;
  const std::chrono::steady_clock::time_point start_;
  std::FILE* file_;
  std::map<std::string, int> lanes_;  // engine thread only

  common::Mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::string> pending_ HORA_GUARDED_BY(mutex_);
  bool stop_ HORA_GUARDED_BY(mutex_) = false;
  bool first_ = true;  // writer thread only
  std::thread writer_;
};

// The engine's timeline, if one is open: every call is a no-op while none is. Engine thread only.
class Tracer {
 public:
  void open(std::unique_ptr<Timeline> timeline) { timeline_ = std::move(timeline); }
  void close() { timeline_.reset(); }  // closes the file
  bool active() const { return timeline_ != nullptr; }

  void begin(const std::string& tensor, std::string_view event, std::string_view args_json = {}) {
    if (timeline_) timeline_->begin(tensor, event, args_json);
  }
  void end(const std::string& tensor) {
    if (timeline_) timeline_->end(tensor);
  }
  void mark(const std::string& tensor, std::string_view event) {
    if (timeline_) timeline_->mark(tensor, event);
  }
  void cycleStart() {
    if (timeline_) timeline_->cycleStart();
  }

 private:
  std::unique_ptr<Timeline> timeline_;
};

// A collective's name in timeline events: "ALLREDUCE", as in NEGOTIATE_ALLREDUCE.
std::string eventNameOf(CollectiveKind kind);

// The file a rank writes: `path` itself for rank 0 alone, or with ".rank<N>" before a ".json"
// suffix (appended otherwise) when every rank records.
std::string timelinePathFor(const std::string& path, int rank, bool all_ranks);

}  // namespace hora::engine
