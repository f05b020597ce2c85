// ProcessSets: the Engine's runtimes, one per process set this rank belongs to (set 0 = every
// rank). Each set has its own communicator (split from the world's) and its own engine thread,
// so collectives of different sets never queue behind each other.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "engine/runtime.h"

namespace hora::engine {

class ProcessSets {
 public:
  ProcessSets(std::unique_ptr<Communicator> world, const EngineOptions& options);
  ~ProcessSets();

  Runtime& world() { return *world_; }
  // The runtime of set `id` for this rank; throws InvalidArgumentError for an unknown set or
  // one this rank is not a member of.
  std::shared_ptr<Runtime> runtimeOf(int id) const HORA_EXCLUDES(mutex_);
  int add(std::vector<int> ranks) HORA_EXCLUDES(mutex_);
  void remove(int id) HORA_EXCLUDES(mutex_);
  std::vector<int> ranksOf(int id) const HORA_EXCLUDES(mutex_);
  std::vector<int> ids() const HORA_EXCLUDES(mutex_);
  void shutdown(const std::string& why = "") HORA_EXCLUDES(mutex_);

 private:
  struct Set {
    std::vector<int> ranks;             // global ranks, ascending
    std::shared_ptr<Runtime> runtime;   // null where this rank is not a member
  };
  // Every rank must call add/remove alike: an allreduce through set 0 checks that they agree.
  void agree(const std::string& what, const std::vector<int64_t>& values) HORA_EXCLUDES(mutex_);
  // Checks `ranks` with every rank, then connects this rank's runtime of the set (null where
  // it is not a member).
  std::shared_ptr<Runtime> joinSet(int id, int split, const std::vector<int>& ranks) HORA_EXCLUDES(mutex_);

  const EngineOptions options_;
  std::shared_ptr<Runtime> world_;
  mutable common::Mutex mutex_;
  std::map<int, Set> sets_ HORA_GUARDED_BY(mutex_);
  // Ids of removed sets are given out again, oldest first, before new ones (as Horovod does:
  // code written for it may expect a re-added set to take the freed id).
  int next_id_ HORA_GUARDED_BY(mutex_) = 1;
  std::deque<int> free_ids_ HORA_GUARDED_BY(mutex_);
  // Counts adds, so that each split's rendezvous keys are new although its id may not be.
  int splits_ HORA_GUARDED_BY(mutex_) = 0;
};

}  // namespace hora::engine
