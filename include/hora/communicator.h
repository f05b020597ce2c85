// Communicator: a group of ranks that run collectives on raw buffers.
//
// Lifetime: create one per process (Communicator::fromEnvironment()) after the launcher started
// the job; destroying it closes every connection. A process with no HORA_* environment gets a
// communicator of size 1, whose collectives are local copies, so a plain program works.
//
// Collective contract (NCCL/MPI style): every rank of the communicator calls the same
// collectives in the same order with agreeing arguments. Disagreement that can be detected
// (byte counts on the wire, the order of collectives) raises MismatchError on the ranks that
// see it. Every call blocks until its result is complete or its deadline
// (HORA_TIMEOUT_SECONDS, default 30 s) passes.
//
// Failure: the first PeerError, TimeoutError or MismatchError breaks the communicator; every
// later call rethrows it. InvalidArgumentError is raised before anything is sent and leaves the
// communicator usable.
//
// Thread safety: one thread at a time may call into a Communicator (the engine's background
// thread, in a training job). Calls from several threads must be serialized by the caller.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hora/export.h"
#include "hora/identity.h"
#include "hora/options.h"
#include "hora/types.h"

namespace hora {

namespace detail {
class CommunicatorImpl;
}

class HORA_API Communicator {
 public:
  // Joins the job described by the environment (HORA_RANK, HORA_SIZE, HORA_RENDEZVOUS_ADDR,
  // HORA_RENDEZVOUS_PORT, HORA_SECRET, ... as set by horarun) and connects to every peer.
  // Knobs (HORA_TIMEOUT_SECONDS, HORA_IFACE, ...) are read once here.
  static std::unique_ptr<Communicator> fromEnvironment();

  // Joins a job described explicitly; used by tests and by programs with their own launcher.
  static std::unique_ptr<Communicator> create(const Identity& identity,
                                              const RendezvousOptions& rendezvous,
                                              const CommunicatorOptions& options);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // A new communicator over `members` (ascending ranks of this one, including this rank),
  // connected through the same rendezvous store. Every member calls it with the same members and
  // the same `key`, which must be unique among the splits of this communicator; non-members do
  // not call it. Blocks until the members have connected or the timeout passes. Safe to call
  // while another thread runs collectives on this communicator.
  std::unique_ptr<Communicator> split(const std::vector<int>& members, const std::string& key) const;

  const Identity& identity() const;
  const CommunicatorOptions& options() const;
  int rank() const { return identity().rank; }
  int size() const { return identity().size; }

  // recv[i] = op over ranks of send[i], for i < count. In place when send == recv.
  void allreduce(const void* send, void* recv, size_t count, DataType type,
                 const AllreduceOptions& options = {});

  // recv = concatenation over ranks r of the recv_counts[r] elements that rank r sends.
  // send_count must equal recv_counts[rank()]. In place when send == recv + displacement of
  // this rank's block.
  void allgather(const void* send, size_t send_count, void* recv,
                 std::span<const size_t> recv_counts, DataType type);

  // buffer on every rank = buffer on root.
  void broadcast(void* buffer, size_t count, DataType type, int root);

  // Reduces send (sum of recv_counts elements, identical layout on every rank) and leaves block
  // r of the result on rank r: recv gets recv_counts[rank()] elements. In place when recv ==
  // send + displacement of this rank's block.
  void reducescatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                     DataType type, const AllreduceOptions& options = {});

  // Rank r sends send_counts[d] elements (consecutive blocks of send) to each rank d and
  // receives recv_counts[s] elements from each rank s into consecutive blocks of recv.
  // recv_counts[s] must equal rank s's send_counts[rank()]; exchangeCounts() computes them.
  void alltoall(const void* send, std::span<const size_t> send_counts, void* recv,
                std::span<const size_t> recv_counts, DataType type);

  // Returns, for each rank s, what rank s passed as counts[rank()] (an alltoall of counts).
  std::vector<size_t> exchangeCounts(std::span<const size_t> counts);

  // Returns when every rank has entered barrier().
  void barrier();

  // For a background thread that runs collectives only when some rank has work: blocks without
  // spinning until another rank has entered a collective (its first bytes arrived; a lost peer
  // counts too), `wake_fd` (an eventfd or pipe, if >= 0) is readable, or `timeout` passes.
  // Returns false on timeout. Consumes nothing.
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd = -1);

  // The planner's tunable choices (autotuning, Note [autotuning] in the engine): the ring
  // threshold that applies to this communicator's world (the shared-memory one when every peer
  // is over shared memory) and the hierarchical allreduce / allgather choices, which matter only
  // when the hierarchy is possible (several hosts with the same number of ranks each).
  struct PlanTuning {
    size_t ring_threshold_bytes = 0;
    HierarchyChoice hierarchical_allreduce = HierarchyChoice::kAuto;
    HierarchyChoice hierarchical_allgather = HierarchyChoice::kAuto;
    bool hierarchy_possible = false;  // read only
    bool shared_memory = false;       // read only: the threshold is HORA_SHM_RING_THRESHOLD's
  };
  PlanTuning planTuning() const;
  // Every rank calls it between the same two collectives (the plan must agree everywhere). The
  // hierarchy's inner groups, once built, keep their own thresholds.
  void setPlanTuning(const PlanTuning& tuning);

  // How a collective of this many bytes runs, for timelines and logs (the planner's choice, the
  // one the collective itself makes): "ring over tcp", "recursive doubling over shared memory",
  // "ring over shared memory + tcp" (ranks on several hosts: shared memory between the ranks of a
  // host), "hierarchical (...)", "local" for a single rank.
  std::string algorithmFor(CollectiveKind collective, size_t bytes, ReduceOp op = ReduceOp::kSum) const;

  // Why an allreduce or a reducescatter (`collective`) of `type` elements with options `o` would
  // be refused on a group of `ranks` ranks before anything moves (a type the op cannot reduce,
  // scale factors on integers, Adasum outside an allreduce on a power of two), or empty when it
  // would run. These are the checks allreduce and reducescatter make; the engine makes them when
  // a tensor is enqueued, so that every rank refuses alike before negotiating.
  static std::string whyRefused(CollectiveKind collective, DataType type, const AllreduceOptions& o, int ranks);

 private:
  explicit Communicator(std::unique_ptr<detail::CommunicatorImpl> impl);
  std::unique_ptr<detail::CommunicatorImpl> impl_;
};

}  // namespace hora
