#include "engine/process_sets.h"

#include <algorithm>
#include <numeric>

#include "hora/errors.h"

namespace hora::engine {

ProcessSets::ProcessSets(std::unique_ptr<Communicator> world, const EngineOptions& options)
    : options_(options), world_(std::make_shared<Runtime>(std::move(world), options)) {
  std::vector<int> all(static_cast<size_t>(world_->identity().size));
  std::iota(all.begin(), all.end(), 0);
  sets_.emplace(0, Set{std::move(all), world_});
}

ProcessSets::~ProcessSets() { shutdown(); }

std::shared_ptr<Runtime> ProcessSets::runtimeOf(int id) const {
  common::MutexLock lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) throw InvalidArgumentError("process set " + std::to_string(id) + " does not exist");
  if (!it->second.runtime)
    throw InvalidArgumentError("rank " + std::to_string(world_->identity().rank) + " is not a member of process set " +
                               std::to_string(id));
  return it->second.runtime;
}

void ProcessSets::agree(const std::string& what, const std::vector<int64_t>& values) {
  // Min over ranks of (v, -v) gives every position's minimum and maximum at once: equal on
  // every rank exactly when all ranks passed the same values. A different count fails the
  // negotiation itself with a shape mismatch on every rank.
  std::vector<int64_t> both(values);
  for (int64_t v : values) both.push_back(-v);
  Request r;
  r.name = "hora." + what;
  r.type = DataType::kInt64;
  r.shape = {static_cast<int64_t>(both.size())};
  r.input = r.output = both.data();
  r.reduce.op = ReduceOp::kMin;
  world_->enqueue(std::move(r), {}).wait(world_->communicator().options().timeout);
  for (size_t i = 0; i < values.size(); ++i)
    if (both[i] != -both[i + values.size()])
      throw InvalidArgumentError(what + ": the ranks passed different arguments");
}

int ProcessSets::add(std::vector<int> ranks) {
  int id, split;
  {
    common::MutexLock lock(mutex_);
    if (free_ids_.empty()) {
      id = next_id_++;
    } else {
      id = free_ids_.front();
      free_ids_.pop_front();
    }
    split = splits_++;
  }
  try {
    std::shared_ptr<Runtime> runtime = joinSet(id, split, ranks);
    common::MutexLock lock(mutex_);
    sets_.emplace(id, Set{std::move(ranks), std::move(runtime)});
    return id;
  } catch (...) {  // every rank fails alike (agree), so every rank gives the id back alike
    common::MutexLock lock(mutex_);
    free_ids_.push_front(id);
    throw;
  }
}

std::shared_ptr<Runtime> ProcessSets::joinSet(int id, int split, const std::vector<int>& ranks) {
  const std::string what = "add_process_set." + std::to_string(id);
  agree(what, std::vector<int64_t>(ranks.begin(), ranks.end()));
  const int size = world_->identity().size;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size || (i > 0 && ranks[i] <= ranks[i - 1]))
      throw InvalidArgumentError(what + ": ranks must be ascending, distinct and below " + std::to_string(size));
  }
  if (ranks.empty()) throw InvalidArgumentError(what + ": a process set needs at least one rank");
  if (!std::binary_search(ranks.begin(), ranks.end(), world_->identity().rank)) return nullptr;
  EngineOptions options = options_;
  options.timeline.clear();  // the timeline records set 0
  options.autotune.enabled = false;  // and the autotuner tunes set 0 only (Note [autotuning])
  const std::string key = "set" + std::to_string(id) + "." + std::to_string(split);
  return std::make_shared<Runtime>(world_->communicator().split(ranks, key), options);
}

void ProcessSets::remove(int id) {
  if (id == 0) throw InvalidArgumentError("process set 0 (every rank) cannot be removed");
  ranksOf(id);  // throws for an unknown set
  agree("remove_process_set." + std::to_string(id), {id});
  std::shared_ptr<Runtime> runtime;
  {
    common::MutexLock lock(mutex_);
    auto it = sets_.find(id);
    if (it == sets_.end()) return;  // removed by another thread meanwhile
    runtime = std::move(it->second.runtime);
    sets_.erase(it);
    free_ids_.push_back(id);
  }
  if (runtime) runtime->shutdown("removed process set " + std::to_string(id));
}

std::vector<int> ProcessSets::ranksOf(int id) const {
  common::MutexLock lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) throw InvalidArgumentError("process set " + std::to_string(id) + " does not exist");
  return it->second.ranks;
}

std::vector<int> ProcessSets::ids() const {
  common::MutexLock lock(mutex_);
  std::vector<int> out;
  for (const auto& [id, set] : sets_) out.push_back(id);
  return out;
}

void ProcessSets::shutdown(const std::string& why) {
  std::vector<std::shared_ptr<Runtime>> runtimes;
  {
    common::MutexLock lock(mutex_);
    for (auto& [id, set] : sets_)
      if (id != 0 && set.runtime) runtimes.push_back(set.runtime);
  }
  for (auto& r : runtimes) r->shutdown(why);
  world_->shutdown(why);
}

}  // namespace hora::engine
