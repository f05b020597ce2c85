#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <cctype>
#include <string>

namespace hora::common {

spdlog::logger& logger() {
  // Built on first use and never destroyed, so logging from static destructors is safe.
  static spdlog::logger* instance = [] {
    auto* l = new spdlog::logger("hora", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[hora %H:%M:%S.%e %L] %v");
    l->set_level(spdlog::level::warn);
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *instance;
}

std::optional<spdlog::level::level_enum> parseLogLevel(std::string_view text) {
  using L = spdlog::level::level_enum;
  std::string level(text);  // any case: horovodrun's --log-level takes WARNING, DEBUG, ...
  for (char& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (level == "trace") return L::trace;
  if (level == "debug") return L::debug;
  if (level == "info") return L::info;
  if (level == "warning" || level == "warn") return L::warn;
  if (level == "error") return L::err;
  if (level == "fatal" || level == "critical") return L::critical;
  if (level == "off") return L::off;
  return std::nullopt;
}

void setLogLevel(spdlog::level::level_enum level) { logger().set_level(level); }

namespace {
// The pattern's parts; set from the main thread at start-up (init, HORA_LOG_HIDE_TIME).
std::atomic<int> log_rank{-1};
std::atomic<bool> hide_time{false};

void applyPattern() {
  const int rank = log_rank.load();
  logger().set_pattern(std::string("[hora ") + (hide_time.load() ? "" : "%H:%M:%S.%e ") + "%L" +
                       (rank >= 0 ? " rank " + std::to_string(rank) : std::string()) + "] %v");
}
}  // namespace

void setLogRank(int rank) {
  log_rank = rank;
  applyPattern();
}

void setLogHideTime(bool hide) {
  hide_time = hide;
  applyPattern();
}

}  // namespace hora::common
