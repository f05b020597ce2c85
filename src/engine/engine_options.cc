#include "engine/engine_options.h"

#include <chrono>
#include <cstdint>

namespace hora::engine {

EngineOptions engineOptionsFrom(const common::Env& env) {
  EngineOptions o;
  o.cycle_time = std::chrono::microseconds(
      static_cast<int64_t>(env.getDouble("HORA_CYCLE_TIME", 0.0, 60000.0) * 1000));
  o.fusion_threshold = static_cast<size_t>(env.getBytes("HORA_FUSION_THRESHOLD", 0, int64_t{1} << 40));
  o.bucket_bytes = static_cast<size_t>(env.getBytes("HORA_BUCKET_BYTES", 0, int64_t{1} << 40));
  o.cache_capacity = static_cast<int>(env.getInt("HORA_CACHE_CAPACITY", 0, 1 << 20));
  o.stall_check = std::chrono::seconds(env.getInt("HORA_STALL_CHECK_TIME_SECONDS", 0, 1 << 30));
  o.stall_shutdown = std::chrono::seconds(env.getInt("HORA_STALL_SHUTDOWN_TIME_SECONDS", 0, 1 << 30));
  o.timeline = env.getString("HORA_TIMELINE");
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: no file until the script calls start_timeline().
  if (o.timeline == "DYNAMIC") o.timeline.clear();
  o.timeline_mark_cycles = env.getBool("HORA_TIMELINE_MARK_CYCLES");
  o.timeline_all_ranks = env.getBool("HORA_TIMELINE_ALL_RANKS");
  return o;
}

}  // namespace hora::engine

namespace hora {

EngineOptions EngineOptions::fromEnvironment() {
  return engine::engineOptionsFrom(common::Env::fromProcess());
}

}  // namespace hora
