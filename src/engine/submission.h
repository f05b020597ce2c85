// Submission: a request of this rank, from enqueue until its response ran. Queued by the user
// thread that enqueued it, then owned by the engine thread.
#pragma once

#include <memory>

#include "engine/handle.h"
#include "engine/messages.h"

namespace hora::engine {

struct Submission {
  Request request;
  RequestMeta meta;
  std::shared_ptr<Handle::State> state;
};

}  // namespace hora::engine
