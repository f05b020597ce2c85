// Engine: named asynchronous collectives, negotiated among the ranks by one background thread
// (Horovod's semantics). The core of every frontend; it knows nothing of any framework.
//
// A frontend thread enqueues a named Request and gets a Handle. Ranks may enqueue the same names
// in different orders and from several threads; each cycle (HORA_CYCLE_TIME) the ranks agree
// which names every rank has submitted, validate that they agree on every field, and execute
// them in the same order everywhere, fusing small allreduces into one buffer
// (HORA_FUSION_THRESHOLD). A response cache (HORA_CACHE_CAPACITY) turns the steady state (the
// same names every step) into one small allreduce per cycle.
//
// Errors: a request whose fields differ between ranks fails on every rank with the same
// MismatchError naming the tensor, the field and the ranks. A fatal error (a peer lost, a
// timeout) fails every pending and later request with that error. After shutdown() every
// pending request fails with ShutdownError; a new Engine may be created afterwards.
//
// Thread safety: enqueue() and the Handle methods may be called from any thread. The buffers of
// a request must stay valid until its handle completes.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hora/communicator.h"
#include "hora/export.h"
#include "hora/options.h"
#include "hora/types.h"

namespace hora {

// Allocates the output of a request whose shape is known only after negotiation (allgather,
// alltoall, reducescatter); called on the engine thread; returns the data pointer of a tensor of
// that shape and the request's type.
using OutputAllocator = std::function<void*(const std::vector<int64_t>& shape)>;

struct Request {
  std::string name;
  CollectiveKind op = CollectiveKind::kAllreduce;
  DataType type = DataType::kFloat32;
  std::vector<int64_t> shape;  // dimension 0 may differ between ranks for allgather / alltoall
  const void* input = nullptr;
  void* output = nullptr;  // allreduce, broadcast: same shape as the input (may be the input)
  OutputAllocator allocate_output;  // allgather, alltoall, reducescatter
  AllreduceOptions reduce;          // allreduce, reducescatter
  int root = 0;                     // broadcast
  std::vector<int64_t> splits;      // alltoall: rows of dimension 0 for each rank; empty = even
  int process_set = 0;              // 0: every rank; otherwise an id from addProcessSet
};

class HORA_API Handle {
 public:
  bool poll() const;  // true once the request completed, successfully or not
  // Waits for completion; rethrows the request's error. TimeoutError when `timeout` passes first.
  void wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) const;
  // The error of a completed request, or null.
  std::exception_ptr error() const;
  // The output shape (allgather, alltoall, reducescatter: as allocated).
  std::vector<int64_t> outputShape() const;

  struct State;
  explicit Handle(std::shared_ptr<State> s) : state_(std::move(s)) {}

 private:
  std::shared_ptr<State> state_;
};

// HORA_AUTOTUNE and the bounds of its search (Horovod's HOROVOD_AUTOTUNE_*; docs/autotune.md).
struct HORA_API AutotuneOptions {
  bool enabled = false;       // HORA_AUTOTUNE
  std::string log;            // HORA_AUTOTUNE_LOG: a CSV of every sample, written by rank 0
  int warmup_samples = 3;     // HORA_AUTOTUNE_WARMUP_SAMPLES
  int steps_per_sample = 10;  // HORA_AUTOTUNE_STEPS_PER_SAMPLE
  int max_samples = 20;       // HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
  double noise = 0.8;         // HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
  // The HORA_* names of the tunable knobs the user set: they keep their values.
  std::vector<std::string> fixed;
  bool operator==(const AutotuneOptions&) const = default;
};

// What the autotuner sets, applied by every rank at the same cycle (Engine::tuningHistory).
struct TunedParameters {
  size_t fusion_threshold = 0;             // HORA_FUSION_THRESHOLD
  std::chrono::microseconds cycle_time{0};  // HORA_CYCLE_TIME
  bool cache_enabled = true;               // the response cache in use (HORA_CACHE_CAPACITY > 0)
  size_t ring_threshold = 0;  // the world's: HORA_SHM_RING_THRESHOLD over shared memory, else HORA_RING_THRESHOLD
  size_t bucket_bytes = 0;    // HORA_BUCKET_BYTES
  HierarchyChoice hierarchical_allreduce = HierarchyChoice::kAuto;  // tuned only across hosts
  HierarchyChoice hierarchical_allgather = HierarchyChoice::kAuto;
  bool operator==(const TunedParameters&) const = default;
};

struct TuningRecord {
  uint64_t cycle = 0;  // the engine cycle (EngineStats::cycles) that applied it, the same on every rank
  TunedParameters parameters;
  bool final = false;  // the search ended: these are the best parameters found, kept from now on
};

// The initializers mirror the knob registry's defaults, and a test fails when they differ (Note
// [one source for defaults] in src/common/knobs.h).
struct HORA_API EngineOptions {
  std::chrono::microseconds cycle_time{1000};  // HORA_CYCLE_TIME (ms): idle housekeeping period
  size_t fusion_threshold = 128u << 20;       // HORA_FUSION_THRESHOLD (bytes)
  size_t bucket_bytes = 1u << 20;             // HORA_BUCKET_BYTES: Note [buckets] (0 = none)
  int cache_capacity = 1024;                  // HORA_CACHE_CAPACITY
  bool submission_board = true;              // HORA_SUBMISSION_BOARD: Note [submission board]
  std::chrono::seconds stall_check{60};       // HORA_STALL_CHECK_TIME_SECONDS (0 = off)
  std::chrono::seconds stall_shutdown{0};     // HORA_STALL_SHUTDOWN_TIME_SECONDS (0 = never)
  std::string timeline;                       // HORA_TIMELINE: a trace file, empty = off
  bool timeline_mark_cycles = false;          // HORA_TIMELINE_MARK_CYCLES
  bool timeline_all_ranks = false;            // HORA_TIMELINE_ALL_RANKS: a file per rank
  std::vector<int> thread_affinity;           // HORA_THREAD_AFFINITY: a core per local rank, empty = any
  AutotuneOptions autotune;                   // HORA_AUTOTUNE*: Note [autotuning]
  static EngineOptions fromEnvironment();
  bool operator==(const EngineOptions&) const = default;
};

// Counters of the engine thread, for benchmarks and tests.
struct EngineStats {
  uint64_t cycles = 0;              // negotiation cycles run
  uint64_t full_negotiations = 0;   // cycles that had to exchange new requests
  uint64_t cached_responses = 0;    // responses decided by the cache alone
  uint64_t fused_allreduces = 0;    // collectives that carried more than one tensor
  double negotiation_seconds = 0;   // time spent negotiating (not executing)
};

namespace engine {
class Runtime;
class ProcessSets;
}

class HORA_API Engine {
 public:
  Engine(std::unique_ptr<Communicator> comm, const EngineOptions& options);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Identity& identity() const;

  // Never blocks on other ranks. `done` (optional) runs on the engine thread at completion.
  Handle enqueue(Request request, std::function<void(std::exception_ptr)> done = {});

  // This rank has no more data (Horovod's join). Until every rank of the process set has
  // joined, the others' allreduces go on with zeros in place of this rank's tensors, and Average
  // divides by the set's size, zeros included (as Horovod's does); other collectives fail while
  // a rank has joined. When
  // the last rank joins the handle completes on every rank and *last_rank holds that rank (in
  // the process set's numbering). last_rank must stay valid until then. `done` (optional) runs on
  // the engine thread at completion, as enqueue's.
  Handle join(int32_t* last_rank, int process_set = 0, std::function<void(std::exception_ptr)> done = {});
  // Completes when every rank of the process set has called barrier().
  Handle barrier(int process_set = 0);

  // Process sets (Horovod's): sub-groups of ranks, each negotiating on its own thread and
  // connections, so collectives of different sets never wait for each other. Set 0 holds every
  // rank. addProcessSet is called by EVERY rank with the same ascending ranks, in the same order
  // as the other ranks' calls; it returns the new set's id (the same on every rank) after the
  // members have connected. A mismatch between ranks raises InvalidArgumentError everywhere.
  int addProcessSet(std::vector<int> ranks);
  // Called by every rank; pending requests of the set fail with ShutdownError.
  void removeProcessSet(int id);
  // The global ranks of a set (ascending); InvalidArgumentError for an unknown id.
  std::vector<int> processSetRanks(int id) const;
  std::vector<int> processSetIds() const;

  // Stops the background threads after agreeing with the other ranks; idempotent. Pending and
  // later requests fail with ShutdownError on every rank, naming the ranks that stopped and
  // `why` ("rank 1 called shutdown()"): a phrase that follows "rank N", e.g. "is exiting: its
  // script raised ValueError: bad shard 3"; empty says "shut down its engine".
  void shutdown(const std::string& why = "");

  EngineStats stats() const;
  // The parameters the autotuner applied to process set 0, in order (empty without
  // HORA_AUTOTUNE); the last one is `final` once the search has ended.
  std::vector<TuningRecord> tuningHistory() const;

  // How many threads of this process compute (e.g. torch's intra-op threads; 1 by default).
  // hora's waiting threads spin only while those leave them a core (Note [who may spin] in
  // src/common/cpu_share.h); frontends call this when they learn the number.
  static void setComputeThreads(int threads);

  // Starts (or restarts, in a new file) and stops the timeline at run time; they take effect at
  // the next cycle. Only rank 0 records unless all_ranks is set.
  void startTimeline(const std::string& path, bool mark_cycles = false, bool all_ranks = false);
  void stopTimeline();

 private:
  std::unique_ptr<engine::ProcessSets> sets_;
};

}  // namespace hora
