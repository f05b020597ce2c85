// hora::Engine, the public facade (include/hora/engine.h): it routes each call to the Runtime
// of the request's process set (process_sets.h).
#include "hora/engine.h"

#include "common/cpu_share.h"
#include "engine/handle.h"
#include "engine/process_sets.h"

namespace hora {

Engine::Engine(std::unique_ptr<Communicator> comm, const EngineOptions& options)
    : sets_(std::make_unique<engine::ProcessSets>(std::move(comm), options)) {}
Engine::~Engine() = default;
const Identity& Engine::identity() const { return sets_->world().identity(); }

Handle Engine::enqueue(Request request, std::function<void(std::exception_ptr)> done) {
  std::shared_ptr<engine::Runtime> runtime;
  try {
    runtime = sets_->runtimeOf(request.process_set);
  } catch (const Error&) {
    return engine::failedHandle(std::current_exception(), std::move(done));
  }
  return runtime->enqueue(std::move(request), std::move(done));
}

Handle Engine::join(int32_t* last_rank, int process_set, std::function<void(std::exception_ptr)> done) {
  Request r;
  r.name = "hora.join";
  r.op = CollectiveKind::kJoin;
  r.type = DataType::kInt32;
  r.shape = {0};
  r.output = last_rank;
  r.process_set = process_set;
  return enqueue(std::move(r), std::move(done));
}

Handle Engine::barrier(int process_set) {
  Request r;
  r.name = "hora.barrier";
  r.op = CollectiveKind::kBarrier;
  r.shape = {0};
  r.process_set = process_set;
  return enqueue(std::move(r));
}

int Engine::addProcessSet(std::vector<int> ranks) { return sets_->add(std::move(ranks)); }
void Engine::removeProcessSet(int id) { sets_->remove(id); }
std::vector<int> Engine::processSetRanks(int id) const { return sets_->ranksOf(id); }
std::vector<int> Engine::processSetIds() const { return sets_->ids(); }
void Engine::shutdown(const std::string& why) { sets_->shutdown(why); }
void Engine::startTimeline(const std::string& path, bool mark_cycles, bool all_ranks) {
  sets_->world().startTimeline(path, mark_cycles, all_ranks);
}
void Engine::stopTimeline() { sets_->world().stopTimeline(); }
EngineStats Engine::stats() const { return sets_->world().stats(); }
std::vector<TuningRecord> Engine::tuningHistory() const { return sets_->world().tuningHistory(); }
void Engine::setComputeThreads(int threads) { common::CpuShare::process().setComputeThreads(threads); }

}  // namespace hora
