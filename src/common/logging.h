// Logging through spdlog, one logger named "hora" writing to stderr.
//
// Lines look like `[hora 12:00:00.123 W rank 3] message`. The level comes from HORA_LOG_LEVEL
// (applyLogLevel in config.h); the rank tag from setLogRank once a process knows its rank. Thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <optional>
#include <string_view>

namespace hora::common {

spdlog::logger& logger();
// Accepts trace, debug, info, warning (or warn), error, fatal (or critical), off; nullopt for
// anything else.
std::optional<spdlog::level::level_enum> parseLogLevel(std::string_view level);
void setLogLevel(spdlog::level::level_enum level);
// HORA_LOG_HIDE_TIME: log lines without the time of day (Horovod's HOROVOD_LOG_HIDE_TIME).
void setLogHideTime(bool hide);
void setLogRank(int rank);

}  // namespace hora::common

#define HORA_LOG(level, ...) ::hora::common::logger().level(__VA_ARGS__)
