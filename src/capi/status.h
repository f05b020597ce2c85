// The C ABI's status of each kind of hora::Error, one to one (hora/c_api.h), for every C
// boundary: the Communicator's C ABI and the engine's table for op libraries
// (src/python/engine_access.h).
#pragma once

#include "hora/c_api.h"
#include "hora/errors.h"

namespace hora::capi {

inline hora_status statusOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return HORA_ERR_INVALID_ARGUMENT;
    case ErrorKind::kTimeout: return HORA_ERR_TIMEOUT;
    case ErrorKind::kPeer: return HORA_ERR_PEER;
    case ErrorKind::kMismatch: return HORA_ERR_MISMATCH;
    case ErrorKind::kAuthentication: return HORA_ERR_AUTHENTICATION;
    case ErrorKind::kShutdown: return HORA_ERR_SHUTDOWN;
    case ErrorKind::kInternal: return HORA_ERR_INTERNAL;
    case ErrorKind::kRemoved: return HORA_ERR_REMOVED;
  }
  return HORA_ERR_INTERNAL;
}

}  // namespace hora::capi
