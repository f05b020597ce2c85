// Options structs for communicators and collectives (one struct per concern instead of long
// argument lists). The defaults of CommunicatorOptions are the knob registry's
// (HORA_TIMEOUT_SECONDS, ...; docs/knobs.md): its initializers mirror them, and a test fails when
// the two differ (Note [one source for defaults] in src/common/knobs.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>

#include "hora/export.h"
#include "hora/types.h"

namespace hora {

// Scaling is Horovod's: floating-point elements are multiplied by the factor in their own type
// (float16 and bfloat16 in float32), integers in double and then truncated toward zero (a result
// outside the type wraps into its width, as integer sums do; int64 beyond 2^53 loses its low
// bits, as in Horovod). Average is Sum with the postscale factor divided by the number of ranks,
// so an integer Average is Sum * (postscale / n) truncated. bool takes neither scale factors nor
// Average.
struct AllreduceOptions {
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;   // every input is multiplied by this before the reduction
  double postscale = 1.0;  // the result is multiplied by this (by this / n for Average)
  // Adasum only: element counts of the tensors laid end to end in the buffer (they must add up to
  // the count), each of which gets its own coefficients; empty means the buffer is one tensor.
  // Not owned: it must outlive the call.
  std::span<const size_t> tensor_counts = {};
};

struct RendezvousOptions {
  std::string address = "127.0.0.1";  // host or IPv4 address of the store (HORA_RENDEZVOUS_ADDR)
  int port = 0;                       // HORA_RENDEZVOUS_PORT
  std::string secret;                 // job secret (HORA_SECRET); never on a command line
  std::string prefix;                 // keys are prefixed, so one store can serve several jobs
  std::string announce_key;           // set once connected, for the launcher's start timeout
  bool serve_store = false;           // this process serves the store (rank 0 without horarun)
  // Set for a job of mpirun's: address, port and secret are learned through the MPI launcher's
  // key-value service, "pmi-fd:<fd>" (MPICH's Hydra) or "pmix" (OpenMPI); see
  // src/bootstrap/job/launcher_store.h.
  std::string launcher_kvs;
};

// HORA_TRANSPORT: how the ranks of a communicator reach each other.
enum class TransportChoice {
  kAuto,          // shared memory between the ranks of a host, TCP between hosts
  kSharedMemory,  // shared memory; an error when the ranks span hosts
  kTcp,           // TCP, even on one host
};

// HORA_HIERARCHICAL_ALLREDUCE, HORA_HIERARCHICAL_ALLGATHER, HORA_HIERARCHICAL_BROADCAST.
enum class HierarchyChoice { kAuto, kAlways, kNever };

struct CommunicatorOptions {
  // Deadline of every blocking call: a collective, connecting to peers, a store request.
  std::chrono::milliseconds timeout{30000};
  // A peer silent for this long is declared dead (Note [heartbeat]); 0 = no heartbeat.
  std::chrono::milliseconds heartbeat_timeout{3000};
  // Interface whose address peers connect to; empty = the one that reaches the store.
  std::string iface;
  // Allreduce messages of at most this many bytes use recursive doubling, larger the ring.
  size_t ring_threshold_bytes = 512 * 1024;
  // The same over shared memory.
  size_t shm_ring_threshold_bytes = 4 * 1024;
  // Unit of pipelining: received data is reduced and forwarded in chunks of this size.
  size_t chunk_bytes = 256 * 1024;
  // Each rank's shared-memory inbox, split evenly among the rings of its peers on the host
  // (0: each ring holds its minimum, 4 chunks).
  size_t shm_inbox_bytes = 0;
  // How long a waiting rank retries, yielding the CPU, before it sleeps in poll().
  std::chrono::microseconds spin{50};
  std::chrono::microseconds shm_spin{1000};  // the same over shared memory
  TransportChoice transport = TransportChoice::kAuto;
  // Allreduce across hosts: within each host, then among hosts (when the hosts are even).
  HierarchyChoice hierarchical = HierarchyChoice::kAuto;
  // Allgather and broadcast across hosts: among hosts, then within each (when the hosts are even).
  HierarchyChoice hierarchical_allgather = HierarchyChoice::kAuto;
  HierarchyChoice hierarchical_broadcast = HierarchyChoice::kAuto;

  // The options the environment's HORA_* variables give (the registry's defaults for unset ones);
  // like Communicator::fromEnvironment, it applies HORA_LOG_LEVEL to this process.
  static HORA_API CommunicatorOptions fromEnvironment();
  bool operator==(const CommunicatorOptions&) const = default;
};

}  // namespace hora
