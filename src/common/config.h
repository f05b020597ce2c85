// Builds the public configuration structs (Identity, CommunicatorOptions, RendezvousOptions)
// from an Env snapshot. The public fromEnvironment() functions are these applied to
// Env::fromProcess().
#pragma once

#include "common/knobs.h"
#include "hora/engine.h"
#include "hora/identity.h"
#include "hora/options.h"

namespace hora::common {

Identity identityFrom(const Env& env);
CommunicatorOptions communicatorOptionsFrom(const Env& env);
EngineOptions engineOptionsFrom(const Env& env);
// Throws InvalidArgumentError naming the missing variable when size > 1 and the launcher's
// rendezvous variables are absent.
RendezvousOptions rendezvousOptionsFrom(const Env& env, int size);

}  // namespace hora::common
