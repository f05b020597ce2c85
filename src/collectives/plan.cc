#include "collectives/plan.h"

#include "hora/errors.h"

namespace hora::collectives {

namespace {

bool mayUseHierarchy(const GroupShape& g, HierarchyChoice choice) {
  return g.even_hosts && choice != HierarchyChoice::kNever;
}

// Messages up to this size take the latency-optimal algorithms. Over shared memory the ring's
// extra steps cost little, so it takes over much earlier than over TCP (both measured).
size_t ringThreshold(const GroupShape& g, const CommunicatorOptions& o) {
  return g.shared_memory ? o.shm_ring_threshold_bytes : o.ring_threshold_bytes;
}

Algorithm allreduce(size_t count, size_t bytes, ReduceOp reduce, const GroupShape& g,
                    const CommunicatorOptions& o) {
  // Adasum is its own combination, not a sum, and runs flat on every rank (Note [adasum]).
  if (reduce == ReduceOp::kAdasum) return Algorithm::kAdasum;
  // Across hosts it also needs an element per rank and, unless forced, a large message.
  if (mayUseHierarchy(g, o.hierarchical) && count >= static_cast<size_t>(g.size) &&
      (o.hierarchical == HierarchyChoice::kAlways || bytes > o.ring_threshold_bytes))
    return Algorithm::kHierarchical;
  const bool small = bytes <= ringThreshold(g, o) || count < static_cast<size_t>(g.size);
  if (!small) return Algorithm::kRing;
  return reduce == ReduceOp::kMin || reduce == ReduceOp::kMax ? Algorithm::kDissemination
                                                              : Algorithm::kRecursiveDoubling;
}

Algorithm broadcast(size_t bytes, const GroupShape& g, const CommunicatorOptions& o) {
  // Across hosts, unless forced, only when ranks are not placed host by host: otherwise the flat
  // chain crosses each host link once too, and pipelines what the hierarchy does in two phases
  // (measured: 64 MiB across 2 x 2 hosts at 1 Gbit/s, 0.562 s flat, 0.582 s hierarchical).
  if (mayUseHierarchy(g, o.hierarchical_broadcast) &&
      (o.hierarchical_broadcast == HierarchyChoice::kAlways || !g.placed_by_host))
    return Algorithm::kHierarchical;
  return bytes <= ringThreshold(g, o) ? Algorithm::kBinomialTree : Algorithm::kChain;
}

}  // namespace

Plan plan(CollectiveKind op, size_t count, size_t bytes, ReduceOp reduce, const GroupShape& group,
          const CommunicatorOptions& options) {
  if (group.size == 1) return {Algorithm::kLocal};
  switch (op) {
    case CollectiveKind::kAllreduce:
      return {allreduce(count, bytes, reduce, group, options)};
    case CollectiveKind::kAllgather:
      return {mayUseHierarchy(group, options.hierarchical_allgather) ? Algorithm::kHierarchical : Algorithm::kRing};
    case CollectiveKind::kBroadcast:
      return {broadcast(bytes, group, options)};
    case CollectiveKind::kReducescatter:
      return {Algorithm::kRing};
    case CollectiveKind::kAlltoall:
      return {Algorithm::kPairwise};
    case CollectiveKind::kBarrier:
      return {Algorithm::kDissemination};
    case CollectiveKind::kJoin:
      break;  // the engine's request; no collective of its own
  }
  throw InternalError("no algorithm for " + std::string(toString(op)));
}

std::string describe(CollectiveKind op, const Plan& plan, std::string_view transport_name) {
  std::string name;
  switch (plan.algorithm) {
    case Algorithm::kLocal:
      return "local";
    case Algorithm::kHierarchical:
      if (op == CollectiveKind::kAllreduce) return "hierarchical (reduce-scatter, allreduce across hosts, allgather)";
      if (op == CollectiveKind::kAllgather) return "hierarchical (allgather across hosts, then inside each)";
      return "hierarchical (broadcast across hosts, then inside each)";
    case Algorithm::kRing: name = "ring"; break;
    case Algorithm::kRecursiveDoubling: name = "recursive doubling"; break;
    case Algorithm::kDissemination: name = "dissemination"; break;
    case Algorithm::kBinomialTree: name = "binomial tree"; break;
    case Algorithm::kChain: name = "chain"; break;
    case Algorithm::kPairwise: name = "pairwise"; break;
    case Algorithm::kAdasum: name = "adasum (vector-halving, distance-doubling)"; break;
  }
  return name + " over " + std::string(transport_name);
}

}  // namespace hora::collectives
