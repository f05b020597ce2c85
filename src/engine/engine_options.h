// Builds EngineOptions from an Env snapshot of the knob registry (HORA_CYCLE_TIME,
// HORA_FUSION_THRESHOLD, ...). EngineOptions::fromEnvironment() is this applied to
// Env::fromProcess(). No side effect: it only reads the snapshot.
#pragma once

#include "common/knobs.h"
#include "hora/engine.h"

namespace hora::engine {

// Throws InvalidArgumentError naming the variable whose value is malformed or out of range.
EngineOptions engineOptionsFrom(const common::Env& env);

}  // namespace hora::engine
