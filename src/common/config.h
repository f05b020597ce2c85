// Builds the public configuration structs (Identity, CommunicatorOptions, RendezvousOptions)
// from an Env snapshot. The public fromEnvironment() functions are these applied to
// Env::fromProcess(). Parsing has no side effect: the one process-wide setting, the log level,
// is applied by applyLogLevel, which the entry points that configure a process from its
// environment call (Communicator::fromEnvironment, CommunicatorOptions::fromEnvironment).
// EngineOptions are parsed in src/engine/engine_options.h.
#pragma once

#include <spdlog/common.h>

#include "common/knobs.h"
#include "hora/identity.h"
#include "hora/options.h"

namespace hora::common {

Identity identityFrom(const Env& env);
CommunicatorOptions communicatorOptionsFrom(const Env& env);
// Throws InvalidArgumentError naming the missing variable when size > 1 and the launcher's
// rendezvous variables are absent.
RendezvousOptions rendezvousOptionsFrom(const Env& env, int size);
// HORA_LOG_LEVEL; InvalidArgumentError naming it when it is no level.
spdlog::level::level_enum logLevelFrom(const Env& env);
// Sets this process's log level to HORA_LOG_LEVEL (the default when unset).
void applyLogLevel(const Env& env);

}  // namespace hora::common
