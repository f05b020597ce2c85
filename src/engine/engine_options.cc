#include "engine/engine_options.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>

#include "hora/errors.h"

namespace hora::engine {

EngineOptions engineOptionsFrom(const common::Env& env) {
  EngineOptions o;
  o.cycle_time = std::chrono::microseconds(
      static_cast<int64_t>(env.getDouble("HORA_CYCLE_TIME", 0.0, 60000.0) * 1000));
  o.fusion_threshold = static_cast<size_t>(env.getBytes("HORA_FUSION_THRESHOLD", 0, int64_t{1} << 40));
  o.bucket_bytes = static_cast<size_t>(env.getBytes("HORA_BUCKET_BYTES", 0, int64_t{1} << 40));
  o.cache_capacity = static_cast<int>(env.getInt("HORA_CACHE_CAPACITY", 0, 1 << 20));
  o.submission_board = env.getBool("HORA_SUBMISSION_BOARD");
  o.stall_check = std::chrono::seconds(env.getInt("HORA_STALL_CHECK_TIME_SECONDS", 0, 1 << 30));
  o.stall_shutdown = std::chrono::seconds(env.getInt("HORA_STALL_SHUTDOWN_TIME_SECONDS", 0, 1 << 30));
  o.timeline = env.getString("HORA_TIMELINE");
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: no file until the script calls start_timeline().
  if (o.timeline == "DYNAMIC") o.timeline.clear();
  o.timeline_mark_cycles = env.getBool("HORA_TIMELINE_MARK_CYCLES");
  o.timeline_all_ranks = env.getBool("HORA_TIMELINE_ALL_RANKS");
  const std::string cores = env.getString("HORA_THREAD_AFFINITY");
  for (size_t start = 0; !cores.empty() && start <= cores.size();) {
    const size_t comma = std::min(cores.find(',', start), cores.size());
    const std::string id = cores.substr(start, comma - start);
    int core = -1;
    auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), core);
    if (ec != std::errc() || end != id.data() + id.size() || core < 0 || core >= CPU_SETSIZE)
      throw InvalidArgumentError("environment variable HORA_THREAD_AFFINITY='" + cores +
                                 "' is invalid: expected comma-separated core ids, got '" + id + "'");
    o.thread_affinity.push_back(core);
    start = comma + 1;
  }
  o.autotune.enabled = env.getBool("HORA_AUTOTUNE");
  o.autotune.log = env.getString("HORA_AUTOTUNE_LOG");
  o.autotune.warmup_samples = static_cast<int>(env.getInt("HORA_AUTOTUNE_WARMUP_SAMPLES", 0, 1000));
  o.autotune.steps_per_sample = static_cast<int>(env.getInt("HORA_AUTOTUNE_STEPS_PER_SAMPLE", 1, 100000));
  o.autotune.max_samples = static_cast<int>(env.getInt("HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1, 1000));
  o.autotune.noise = env.getDouble("HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0.0, 100.0);
  // Knobs the user chose are not the autotuner's to change (Note [autotuning]).
  for (const char* name : {"HORA_FUSION_THRESHOLD", "HORA_CYCLE_TIME", "HORA_CACHE_CAPACITY", "HORA_RING_THRESHOLD",
                           "HORA_SHM_RING_THRESHOLD", "HORA_BUCKET_BYTES", "HORA_HIERARCHICAL_ALLREDUCE",
                           "HORA_HIERARCHICAL_ALLGATHER"})
    if (env.isSet(name)) o.autotune.fixed.emplace_back(name);
  return o;
}

}  // namespace hora::engine

namespace hora {

EngineOptions EngineOptions::fromEnvironment() {
  return engine::engineOptionsFrom(common::Env::fromProcess());
}

}  // namespace hora
