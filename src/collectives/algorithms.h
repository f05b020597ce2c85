// The collective algorithms, written against transport::Transport (Note [transfer sets]).
//
// Vocabulary: a *block* is what one rank contributes to or receives from an allgather or
// alltoall; a *segment* is the slice of a reduction that one rank owns in the ring (rank r owns
// segment r); a *step* is one hop around the ring; a *chunk* is the transport's pipelining unit.
// Every function takes the inputs already validated by the Communicator; counts are elements.
// All of them are single-threaded and hold no state between calls except `scratch`.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "common/deadline.h"
#include "hora/options.h"
#include "hora/types.h"
#include "transport/transport.h"

namespace hora::collectives {

// The algorithms a Plan chooses from (plan.h).
enum class Algorithm : uint8_t {
  kLocal,              // one rank: a copy at most
  kRing,               // bandwidth-optimal: allreduce, allgather, reducescatter
  kRecursiveDoubling,  // latency-optimal allreduce
  kDissemination,      // latency-optimal allreduce for min and max; the barrier
  kBinomialTree,       // small broadcasts
  kChain,              // large broadcasts
  kPairwise,           // alltoall
  kHierarchical,       // across hosts: inside each host, then among them (hierarchy.h)
  kAdasum,             // Adasum's vector-halving, distance-doubling allreduce (adasum.h)
};

struct Context {
  transport::Transport& transport;
  transport::OpTag tag;
  common::Deadline deadline;
  std::vector<std::byte>& scratch;  // grows on demand; reused across calls
};

// Element offsets of consecutive blocks with the given counts (size n+1, last = total).
std::vector<size_t> offsetsOf(std::span<const size_t> counts);

// Ring allreduce: pipelined reduce-scatter then allgather in one transfer set.
// `send` may equal `recv`. Prescaling is the caller's (it hands a prescaled copy as `send`).
void ringAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                   DataType type, const AllreduceOptions& options);

// Recursive doubling (latency-optimal, log2 n exchanges of the whole message), with the usual
// fold of the ranks beyond the largest power of two.
void recursiveDoublingAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                                DataType type, const AllreduceOptions& options);

// Dissemination allreduce for idempotent ops (min, max): in round k every rank sends what it
// holds to r + 2^k and folds in what r - 2^k sends; after ceil(log2 n) rounds each rank has
// folded every rank (some twice, harmless for min and max). Any n without fold steps, and every
// rank receives in the first round from its left neighbour, so ranks that sleep until a peer's
// first bytes arrive (Note [idle engine]) all wake, one after the other.
void disseminationAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                            DataType type, const AllreduceOptions& options);

// Ring reduce-scatter: rank r ends with the reduction of segment r (counts[r] elements) in
// `recv`. `send` holds every segment.
void ringReduceScatter(Context& ctx, const std::byte* send, std::byte* recv,
                       std::span<const size_t> counts, DataType type,
                       const AllreduceOptions& options);

// Ring allgather with per-rank block counts, forwarding each block as it arrives.
void ringAllgather(Context& ctx, const std::byte* send, std::byte* recv,
                   std::span<const size_t> counts, DataType type);

// Binomial tree (latency-optimal) and pipelined chain (bandwidth-optimal, every rank sends the
// message once); both forward chunk by chunk.
void binomialTreeBroadcast(Context& ctx, std::byte* buffer, size_t bytes, int root);
void chainBroadcast(Context& ctx, std::byte* buffer, size_t bytes, int root);

// Every pair exchanges its blocks directly, all pairs at once.
void pairwiseAlltoall(Context& ctx, const std::byte* send, std::span<const size_t> send_counts,
                      std::byte* recv, std::span<const size_t> recv_counts, DataType type);

// Dissemination barrier: ceil(log2 n) rounds of one-byte tokens.
void disseminationBarrier(Context& ctx);

// The flat allreduce or broadcast `algorithm` names (the plan's choice for this group).
void allreduce(Context& ctx, Algorithm algorithm, const std::byte* send, std::byte* recv, size_t count,
               DataType type, const AllreduceOptions& options);
void broadcast(Context& ctx, Algorithm algorithm, std::byte* buffer, size_t bytes, int root);

}  // namespace hora::collectives
