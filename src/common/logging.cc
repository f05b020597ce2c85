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

bool setLogLevel(std::string_view level) {
  using L = spdlog::level::level_enum;
  L value;
  if (level == "trace") value = L::trace;
  else if (level == "debug") value = L::debug;
  else if (level == "info") value = L::info;
  else if (level == "warning" || level == "warn") value = L::warn;
  else if (level == "error") value = L::err;
  else if (level == "fatal" || level == "critical") value = L::critical;
  else if (level == "off") value = L::off;
  else return false;
  logger().set_level(value);
  return true;
}

void setLogRank(int rank) {
  logger().set_pattern("[hora %H:%M:%S.%e %L rank " + std::to_string(rank) + "] %v");
}

}  // namespace hora::common
