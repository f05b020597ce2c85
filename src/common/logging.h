// Logging through spdlog, one logger named "hora" writing to stderr.
//
// Lines look like `[hora 12:00:00.123 W rank 3] message`. The level comes from HORA_LOG_LEVEL
// (setLogLevel); the rank tag from setLogRank once a process knows its rank. Thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace hora::common {

spdlog::logger& logger();
// Accepts trace, debug, info, warning (or warn), error, fatal (or critical), off.
// Returns false for anything else.
bool setLogLevel(std::string_view level);
void setLogRank(int rank);

}  // namespace hora::common

#define HORA_LOG(level, ...) ::hora::common::logger().level(__VA_ARGS__)
