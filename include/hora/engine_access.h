/* The process's engine, as hora._core holds it, for native libraries loaded beside it (the
 * TensorFlow op library, src/tensorflow): a versioned table of C functions.
 *
 * Why a table and not a shared libhora: hora._core links the engine in statically (it needs no
 * libhora.so at run time), so a second library that linked the engine would hold a second
 * engine. Instead hora._core hands out the address of this table (hora._core.engine_access()),
 * and the frontend passes it to its op library, which calls only through it. The table is C, so
 * the op library and hora._core share no C++ type, allocator or exception across the boundary.
 *
 * Every callback runs on the engine thread and must not block. */
#ifndef HORA_ENGINE_ACCESS_H_
#define HORA_ENGINE_ACCESS_H_

#include <stdint.h>

#include "hora/c_api.h" /* hora_status, hora_dtype, hora_reduce_op */

#ifdef __cplusplus
extern "C" {
#endif

#define HORA_ENGINE_ACCESS_VERSION 1

/* One named request (hora::Request). Pointers are read during enqueue only, except input and
 * output, which must stay valid until `done` runs. */
typedef struct hora_engine_request {
  const char* name;
  int op;    /* hora::CollectiveKind: 0 allreduce, 1 allgather, 2 broadcast, 3 alltoall, 4 reducescatter, 5 join */
  int dtype; /* hora_dtype */
  const int64_t* shape;
  int ndims;
  const void* input;
  void* output; /* allreduce, broadcast: the output (may be the input); join: an int32 for the last rank */
  int reduce_op; /* hora_reduce_op */
  double prescale;
  double postscale;
  int root;              /* broadcast, in the process set's numbering */
  const int64_t* splits; /* alltoall: rows for each member; NULL = even */
  int nsplits;
  int process_set;
} hora_engine_request;

/* Allocates the output of an allgather, alltoall or reducescatter once negotiation knows its
 * shape; returns its data (never NULL: a library that cannot allocate returns scratch memory and
 * reports the failure from `done`, so that this rank still takes part in the collective). */
typedef void* (*hora_engine_allocate_fn)(void* context, const int64_t* shape, int ndims);
/* Completion: HORA_OK, or the error's status and message (valid during the call only). */
typedef void (*hora_engine_done_fn)(void* context, hora_status status, const char* message);

/* What hora_engine_access.topology answers. */
enum {
  HORA_TOPOLOGY_INITIALIZED = 0, /* 1 when hvd.init() has run, else 0 */
  HORA_TOPOLOGY_RANK = 1,
  HORA_TOPOLOGY_SIZE = 2,
  HORA_TOPOLOGY_LOCAL_RANK = 3,
  HORA_TOPOLOGY_LOCAL_SIZE = 4,
  HORA_TOPOLOGY_SET_SIZE = 5,     /* members of process_set */
  HORA_TOPOLOGY_SET_INCLUDED = 6, /* 1 when this rank is a member of process_set, else 0 */
};
/* topology's answers when it cannot answer (Horovod's HOROVOD_PROCESS_SET_ERROR_* values). */
#define HORA_TOPOLOGY_ERROR_INIT (-1)
#define HORA_TOPOLOGY_ERROR_UNKNOWN_SET (-2)

typedef struct hora_engine_access {
  uint32_t version; /* HORA_ENGINE_ACCESS_VERSION */
  uint32_t size;    /* sizeof(hora_engine_access) */
  /* Enqueues on the process's engine. A request refused at once (no engine, a name already in
   * flight) calls `done` with the error before enqueue returns, on the calling thread. */
  void (*enqueue)(const hora_engine_request* request, void* context, hora_engine_allocate_fn allocate,
                  hora_engine_done_fn done);
  /* One of HORA_TOPOLOGY_*; HORA_TOPOLOGY_ERROR_* when it cannot answer. */
  int (*topology)(int what, int process_set);
  /* The position of global rank `rank` in process_set (a broadcast's root is a global rank in
   * Horovod's API, a position in the set in the engine's); -1 when it is not a member,
   * HORA_TOPOLOGY_ERROR_* when the set or the engine is missing. */
  int (*member_index)(int process_set, int rank);
} hora_engine_access;

#ifdef __cplusplus
}
#endif

#endif /* HORA_ENGINE_ACCESS_H_ */
