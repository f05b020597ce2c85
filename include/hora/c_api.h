/* The C ABI of hora: the Communicator's operations for FFI use (Python ctypes, Rust, Julia...).
 *
 * Every function returns a hora_status; on failure hora_last_error() returns the message of the
 * error, valid until the next hora_* call on the same thread. Statuses map one to one to the C++
 * error classes of hora/errors.h. Enum values equal those of hora/types.h.
 * Thread safety: as hora::Communicator (one thread at a time per communicator). */
#ifndef HORA_C_API_H_
#define HORA_C_API_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_C_EXPORT __attribute__((visibility("default")))

typedef struct hora_comm hora_comm;

typedef enum hora_status {
  HORA_OK = 0,
  HORA_ERR_INVALID_ARGUMENT = 1,
  HORA_ERR_TIMEOUT = 2,
  HORA_ERR_PEER = 3,
  HORA_ERR_MISMATCH = 4,
  HORA_ERR_AUTHENTICATION = 5,
  HORA_ERR_SHUTDOWN = 6,
  HORA_ERR_INTERNAL = 7,
  HORA_ERR_REMOVED = 8, /* an elastic job removed this worker: exit, do not retry */
} hora_status;

typedef enum hora_dtype {
  HORA_UINT8 = 0,
  HORA_INT8 = 1,
  HORA_INT32 = 2,
  HORA_INT64 = 3,
  HORA_FLOAT16 = 4,
  HORA_BFLOAT16 = 5,
  HORA_FLOAT32 = 6,
  HORA_FLOAT64 = 7,
  HORA_INT16 = 8,
  HORA_BOOL = 9, /* one byte; Sum and Max are logical or, Product and Min logical and */
} hora_dtype;

typedef enum hora_reduce_op {
  HORA_SUM = 0,
  HORA_AVERAGE = 1,
  HORA_MIN = 2,
  HORA_MAX = 3,
  HORA_PRODUCT = 4,
  HORA_ADASUM = 5, /* allreduce of floating-point tensors on a power-of-two number of ranks */
} hora_reduce_op;

/* Joins the job described by the HORA_* environment (size 1 when none is set). */
HORA_C_EXPORT hora_status hora_comm_init(hora_comm** comm);
/* Closes every connection. Accepts NULL. */
HORA_C_EXPORT void hora_comm_destroy(hora_comm* comm);
HORA_C_EXPORT int hora_comm_rank(const hora_comm* comm);
HORA_C_EXPORT int hora_comm_size(const hora_comm* comm);
HORA_C_EXPORT int hora_comm_local_rank(const hora_comm* comm);
HORA_C_EXPORT int hora_comm_local_size(const hora_comm* comm);
HORA_C_EXPORT int hora_comm_cross_rank(const hora_comm* comm);
HORA_C_EXPORT int hora_comm_cross_size(const hora_comm* comm);

/* The collectives; see hora/communicator.h for their contracts. */
HORA_C_EXPORT hora_status hora_allreduce(hora_comm* comm, const void* send, void* recv, size_t count,
                                         hora_dtype type, hora_reduce_op op, double prescale,
                                         double postscale);
HORA_C_EXPORT hora_status hora_allgather(hora_comm* comm, const void* send, size_t send_count,
                                         void* recv, const size_t* recv_counts, hora_dtype type);
HORA_C_EXPORT hora_status hora_broadcast(hora_comm* comm, void* buffer, size_t count,
                                         hora_dtype type, int root);
HORA_C_EXPORT hora_status hora_reducescatter(hora_comm* comm, const void* send, void* recv,
                                             const size_t* recv_counts, hora_dtype type,
                                             hora_reduce_op op, double prescale, double postscale);
HORA_C_EXPORT hora_status hora_alltoall(hora_comm* comm, const void* send,
                                        const size_t* send_counts, void* recv,
                                        const size_t* recv_counts, hora_dtype type);
HORA_C_EXPORT hora_status hora_barrier(hora_comm* comm);

/* The message of the last failed call on this thread ("" when none). */
HORA_C_EXPORT const char* hora_last_error(void);
/* The status of each kind of hora::Error (the value of hora::ErrorKind), for code that turns
 * hora's C++ errors into statuses itself (hora._core's engine table, hora/engine_access.h). */
HORA_C_EXPORT hora_status hora_status_of_error_kind(int kind);

#ifdef __cplusplus
}
#endif

#endif /* HORA_C_API_H_ */
