// The C ABI: each function converts arguments, calls the Communicator and turns exceptions into
// a status plus a thread-local message. No exception crosses this boundary.
#include "hora/c_api.h"

#include <span>
#include <string>

#include "hora/communicator.h"
#include "hora/errors.h"

struct hora_comm {
  std::unique_ptr<hora::Communicator> comm;
};

namespace {

// The C enums are the C++ ones by value (hora/types.h): the casts below rely on it.
constexpr bool sameType(hora_dtype c, hora::DataType cpp) { return static_cast<int>(c) == static_cast<int>(cpp); }
static_assert(sameType(HORA_UINT8, hora::DataType::kUInt8) && sameType(HORA_INT8, hora::DataType::kInt8) &&
              sameType(HORA_INT32, hora::DataType::kInt32) && sameType(HORA_INT64, hora::DataType::kInt64) &&
              sameType(HORA_FLOAT16, hora::DataType::kFloat16) && sameType(HORA_BFLOAT16, hora::DataType::kBFloat16) &&
              sameType(HORA_FLOAT32, hora::DataType::kFloat32) && sameType(HORA_FLOAT64, hora::DataType::kFloat64) &&
              sameType(HORA_INT16, hora::DataType::kInt16) && sameType(HORA_BOOL, hora::DataType::kBool));
static_assert(hora::kNumDataTypes == HORA_BOOL + 1, "a data type is missing from hora_dtype");

thread_local std::string last_error;

hora_status statusOf(hora::ErrorKind kind) {
  switch (kind) {
    case hora::ErrorKind::kInvalidArgument: return HORA_ERR_INVALID_ARGUMENT;
    case hora::ErrorKind::kTimeout: return HORA_ERR_TIMEOUT;
    case hora::ErrorKind::kPeer: return HORA_ERR_PEER;
    case hora::ErrorKind::kMismatch: return HORA_ERR_MISMATCH;
    case hora::ErrorKind::kAuthentication: return HORA_ERR_AUTHENTICATION;
    case hora::ErrorKind::kShutdown: return HORA_ERR_SHUTDOWN;
    case hora::ErrorKind::kInternal: return HORA_ERR_INTERNAL;
    case hora::ErrorKind::kRemoved: return HORA_ERR_REMOVED;
  }
  return HORA_ERR_INTERNAL;
}

template <typename F>
hora_status guarded(hora_comm* comm, F f) {
  last_error.clear();
  if (comm == nullptr || !comm->comm) {
    last_error = "communicator is NULL";
    return HORA_ERR_INVALID_ARGUMENT;
  }
  try {
    f(*comm->comm);
    return HORA_OK;
  } catch (const hora::Error& e) {
    last_error = e.what();
    return statusOf(e.kind());
  } catch (const std::exception& e) {
    last_error = e.what();
    return HORA_ERR_INTERNAL;
  }
}

std::span<const size_t> countsOf(const hora::Communicator& c, const size_t* counts, const char* name) {
  if (counts == nullptr) throw hora::InvalidArgumentError(std::string(name) + " is NULL");
  return {counts, static_cast<size_t>(c.size())};
}

hora::AllreduceOptions optionsOf(hora_reduce_op op, double prescale, double postscale) {
  return {static_cast<hora::ReduceOp>(op), prescale, postscale};
}

}  // namespace

extern "C" {

hora_status hora_comm_init(hora_comm** out) {
  last_error.clear();
  if (out == nullptr) {
    last_error = "hora_comm_init: out pointer is NULL";
    return HORA_ERR_INVALID_ARGUMENT;
  }
  *out = nullptr;
  auto holder = std::make_unique<hora_comm>();
  hora_status s = HORA_OK;
  try {
    holder->comm = hora::Communicator::fromEnvironment();
  } catch (const hora::Error& e) {
    last_error = e.what();
    s = statusOf(e.kind());
  } catch (const std::exception& e) {
    last_error = e.what();
    s = HORA_ERR_INTERNAL;
  }
  if (s == HORA_OK) *out = holder.release();
  return s;
}

void hora_comm_destroy(hora_comm* comm) { delete comm; }

int hora_comm_rank(const hora_comm* c) { return c ? c->comm->identity().rank : -1; }
int hora_comm_size(const hora_comm* c) { return c ? c->comm->identity().size : -1; }
int hora_comm_local_rank(const hora_comm* c) { return c ? c->comm->identity().local_rank : -1; }
int hora_comm_local_size(const hora_comm* c) { return c ? c->comm->identity().local_size : -1; }
int hora_comm_cross_rank(const hora_comm* c) { return c ? c->comm->identity().cross_rank : -1; }
int hora_comm_cross_size(const hora_comm* c) { return c ? c->comm->identity().cross_size : -1; }

hora_status hora_allreduce(hora_comm* comm, const void* send, void* recv, size_t count,
                           hora_dtype type, hora_reduce_op op, double prescale, double postscale) {
  return guarded(comm, [&](hora::Communicator& c) {
    c.allreduce(send, recv, count, static_cast<hora::DataType>(type), optionsOf(op, prescale, postscale));
  });
}

hora_status hora_allgather(hora_comm* comm, const void* send, size_t send_count, void* recv,
                           const size_t* recv_counts, hora_dtype type) {
  return guarded(comm, [&](hora::Communicator& c) {
    c.allgather(send, send_count, recv, countsOf(c, recv_counts, "recv_counts"),
                static_cast<hora::DataType>(type));
  });
}

hora_status hora_broadcast(hora_comm* comm, void* buffer, size_t count, hora_dtype type, int root) {
  return guarded(comm, [&](hora::Communicator& c) {
    c.broadcast(buffer, count, static_cast<hora::DataType>(type), root);
  });
}

hora_status hora_reducescatter(hora_comm* comm, const void* send, void* recv,
                               const size_t* recv_counts, hora_dtype type, hora_reduce_op op,
                               double prescale, double postscale) {
  return guarded(comm, [&](hora::Communicator& c) {
    c.reducescatter(send, recv, countsOf(c, recv_counts, "recv_counts"),
                    static_cast<hora::DataType>(type), optionsOf(op, prescale, postscale));
  });
}

hora_status hora_alltoall(hora_comm* comm, const void* send, const size_t* send_counts, void* recv,
                          const size_t* recv_counts, hora_dtype type) {
  return guarded(comm, [&](hora::Communicator& c) {
    c.alltoall(send, countsOf(c, send_counts, "send_counts"), recv,
               countsOf(c, recv_counts, "recv_counts"), static_cast<hora::DataType>(type));
  });
}

hora_status hora_barrier(hora_comm* comm) {
  return guarded(comm, [](hora::Communicator& c) { c.barrier(); });
}

const char* hora_last_error(void) { return last_error.c_str(); }

hora_status hora_status_of_error_kind(int kind) { return statusOf(static_cast<hora::ErrorKind>(kind)); }

}  // extern "C"
