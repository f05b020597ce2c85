#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

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

std::optional<spdlog::level::level_enum> parseLogLevel(std::string_view level) {
  using L = spdlog::level::level_enum;
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

void setLogRank(int rank) {
  logger().set_pattern("[hora %H:%M:%S.%e %L rank " + std::to_string(rank) + "] %v");
}

}  // namespace hora::common
