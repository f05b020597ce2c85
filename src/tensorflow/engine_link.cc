#include "tensorflow/engine_link.h"

#include <atomic>

namespace hora::tf {
namespace {
std::atomic<const hora_engine_access*> table{nullptr};
}

const hora_engine_access* engine() { return table.load(std::memory_order_acquire); }

int horaTypeOf(TF_DataType type) {
  switch (type) {
    case TF_UINT8: return HORA_UINT8;
    case TF_INT8: return HORA_INT8;
    case TF_INT16: return HORA_INT16;
    case TF_UINT16: return HORA_INT16;  // only the move ops admit it (op_defs.cc): no arithmetic
    case TF_INT32: return HORA_INT32;
    case TF_INT64: return HORA_INT64;
    case TF_HALF: return HORA_FLOAT16;
    case TF_BFLOAT16: return HORA_BFLOAT16;
    case TF_FLOAT: return HORA_FLOAT32;
    case TF_DOUBLE: return HORA_FLOAT64;
    case TF_BOOL: return HORA_BOOL;
    default: return -1;
  }
}

TF_Code codeOf(hora_status status) {
  switch (status) {
    case HORA_OK: return TF_OK;
    case HORA_ERR_MISMATCH: return TF_FAILED_PRECONDITION;
    case HORA_ERR_INVALID_ARGUMENT: return TF_INVALID_ARGUMENT;
    case HORA_ERR_SHUTDOWN: return TF_ABORTED;
    case HORA_ERR_REMOVED: return TF_UNAVAILABLE;  // an elastic driver removed this worker
    case HORA_ERR_TIMEOUT:
    case HORA_ERR_PEER:
    case HORA_ERR_AUTHENTICATION:
    case HORA_ERR_INTERNAL: return TF_UNKNOWN;
  }
  return TF_UNKNOWN;
}

}  // namespace hora::tf

int hora_attach_engine(const hora_engine_access* access) {
  if (access == nullptr || access->version != HORA_ENGINE_ACCESS_VERSION || access->size < sizeof(hora_engine_access))
    return -1;
  hora::tf::table.store(access, std::memory_order_release);
  return 0;
}
