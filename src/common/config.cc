#include "common/config.h"

#include <climits>
#include <initializer_list>
#include <map>
#include <string_view>
#include <utility>

#include "common/logging.h"
#include "hora/errors.h"

namespace hora::common {

namespace {

// The value of a knob that takes one of a few words; InvalidArgumentError listing them otherwise.
template <typename T>
T oneOf(const Env& env, std::string_view name, std::initializer_list<std::pair<std::string_view, T>> choices) {
  const std::string value = env.getString(name);
  std::string expected;
  for (const auto& [word, choice] : choices) {
    if (value == word) return choice;
    expected += (expected.empty() ? "" : ", ") + std::string(word);
  }
  throw InvalidArgumentError(std::string(name) + "='" + value + "' is invalid: expected one of " + expected);
}

}  // namespace

CommunicatorOptions communicatorOptionsFrom(const Env& env) {
  CommunicatorOptions o;
  const double seconds = env.getDouble("HORA_TIMEOUT_SECONDS", 0.001, 7 * 24 * 3600.0);
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  const double heartbeat = env.getDouble("HORA_HEARTBEAT_TIMEOUT_SECONDS", 0, 7 * 24 * 3600.0);
  o.heartbeat_timeout = std::chrono::milliseconds(static_cast<int64_t>(heartbeat * 1000));
  o.iface = env.getString("HORA_IFACE");
  o.ring_threshold_bytes = static_cast<size_t>(env.getBytes("HORA_RING_THRESHOLD", 0, INT64_MAX));
  o.shm_ring_threshold_bytes = static_cast<size_t>(env.getBytes("HORA_SHM_RING_THRESHOLD", 0, INT64_MAX));
  o.chunk_bytes = static_cast<size_t>(env.getBytes("HORA_CHUNK_BYTES", 16, int64_t{1} << 30));
  if (o.chunk_bytes % 16 != 0)
    throw InvalidArgumentError("HORA_CHUNK_BYTES=" + std::to_string(o.chunk_bytes) +
                               " is invalid: expected a multiple of 16");
  o.shm_inbox_bytes = static_cast<size_t>(env.getBytes("HORA_SHM_INBOX_BYTES", 0, int64_t{1} << 34));
  o.spin = std::chrono::microseconds(env.getInt("HORA_SPIN_MICROSECONDS", 0, 1000000));
  o.shm_spin = std::chrono::microseconds(env.getInt("HORA_SHM_SPIN_MICROSECONDS", 0, 1000000));
  o.transport = oneOf<TransportChoice>(env, "HORA_TRANSPORT",
                                       {{"auto", TransportChoice::kAuto},
                                        {"shm", TransportChoice::kSharedMemory},
                                        {"tcp", TransportChoice::kTcp}});
  const auto hierarchy = [&](std::string_view name) {
    return oneOf<HierarchyChoice>(
        env, name, {{"auto", HierarchyChoice::kAuto}, {"1", HierarchyChoice::kAlways}, {"0", HierarchyChoice::kNever}});
  };
  o.hierarchical = hierarchy("HORA_HIERARCHICAL_ALLREDUCE");
  o.hierarchical_allgather = hierarchy("HORA_HIERARCHICAL_ALLGATHER");
  o.hierarchical_broadcast = hierarchy("HORA_HIERARCHICAL_BROADCAST");
  return o;
}

spdlog::level::level_enum logLevelFrom(const Env& env) {
  const std::string level = env.getString("HORA_LOG_LEVEL");
  if (auto parsed = parseLogLevel(level)) return *parsed;
  throw InvalidArgumentError("HORA_LOG_LEVEL='" + level +
                             "' is invalid: expected trace, debug, info, warning, error or fatal");
}

void applyLogLevel(const Env& env) {
  setLogLevel(logLevelFrom(env));
  setLogHideTime(env.getBool("HORA_LOG_HIDE_TIME"));
}

}  // namespace hora::common

namespace hora {

bool Identity::derivesTopology() const {
  return local_rank == kDerive && local_size == kDerive && cross_rank == kDerive &&
         cross_size == kDerive;
}

void Identity::deriveTopology(const std::vector<std::string>& hostnames) {
  // local: the ranks on my host, in rank order. cross: the hosts that have a rank with my
  // local rank, in the order of their first rank.
  std::vector<int> local_of(hostnames.size());
  std::map<std::string, int> count;
  for (size_t r = 0; r < hostnames.size(); ++r) local_of[r] = count[hostnames[r]]++;
  const auto me = static_cast<size_t>(rank);
  local_rank = local_of[me];
  local_size = count[hostnames[me]];
  cross_rank = cross_size = 0;
  for (size_t r = 0; r < hostnames.size(); ++r) {
    if (local_of[r] != local_rank) continue;
    if (r < me) ++cross_rank;
    ++cross_size;
  }
  hostname = hostnames[me];
}

void Identity::validate() const {
  auto bad = [](const std::string& what) {
    throw InvalidArgumentError("inconsistent identity: " + what);
  };
  const auto s = [](int v) { return std::to_string(v); };
  if (size < 1) bad("size (HORA_SIZE) " + s(size) + " < 1");
  if (rank < 0 || rank >= size) bad("rank (HORA_RANK) " + s(rank) + " outside [0, " + s(size) + ")");
  if (derivesTopology()) return;
  if (local_size < 1 || local_size > size)
    bad("local_size (HORA_LOCAL_SIZE) " + s(local_size) + " outside [1, " + s(size) + "]");
  if (local_rank < 0 || local_rank >= local_size)
    bad("local_rank (HORA_LOCAL_RANK) " + s(local_rank) + " outside [0, " + s(local_size) + ")");
  if (cross_size < 1 || cross_size > size)
    bad("cross_size (HORA_CROSS_SIZE) " + s(cross_size) + " outside [1, " + s(size) + "]");
  if (cross_rank < 0 || cross_rank >= cross_size)
    bad("cross_rank (HORA_CROSS_RANK) " + s(cross_rank) + " outside [0, " + s(cross_size) + ")");
}

CommunicatorOptions CommunicatorOptions::fromEnvironment() {
  const auto env = common::Env::fromProcess();
  CommunicatorOptions options = common::communicatorOptionsFrom(env);
  common::applyLogLevel(env);
  return options;
}

}  // namespace hora
