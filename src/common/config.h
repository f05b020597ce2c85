// Builds CommunicatorOptions from an Env snapshot; CommunicatorOptions::fromEnvironment is this
// applied to Env::fromProcess(). Identity and RendezvousOptions depend on how the job was
// started: src/bootstrap/job/job.h. Parsing has no side effect: the one process-wide setting,
// the log level, is applied by applyLogLevel, which the entry points that configure a process
// from its environment call (Communicator::fromEnvironment, CommunicatorOptions::fromEnvironment).
// EngineOptions are parsed in src/engine/engine_options.h.
#pragma once

#include <spdlog/common.h>

#include "common/knobs.h"
#include "hora/identity.h"
#include "hora/options.h"

namespace hora::common {

CommunicatorOptions communicatorOptionsFrom(const Env& env);
// HORA_LOG_LEVEL; InvalidArgumentError naming it when it is no level.
spdlog::level::level_enum logLevelFrom(const Env& env);
// Sets this process's log level to HORA_LOG_LEVEL (the default when unset).
void applyLogLevel(const Env& env);

}  // namespace hora::common
