// Fusion: which ready responses run together as one collective. A pure policy, the same on every
// rank because the ready list is (Note [replicated negotiation]).
//
// A run of consecutive small allreduces that agree on type, reduce op, scales and joined ranks
// is fused into one allreduce of a buffer holding them all, up to HORA_FUSION_THRESHOLD bytes:
// one collective's latency instead of one per tensor. A tensor of kFuseBelowBytes or more runs
// alone, in place: fusing it would cost two copies of its bytes to save one collective's
// latency. Every other response (another collective, or an error) is a group of its own.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "engine/negotiation.h"

namespace hora::engine {

// Tensors of at least this size are not copied into the fusion buffer.
inline constexpr size_t kFuseBelowBytes = 1 << 20;

// ready[first, first + count): responses that run as one collective.
struct FusionGroup {
  size_t first = 0;
  size_t count = 1;
  bool operator==(const FusionGroup&) const = default;
};

// Splits `ready`, in order, into the groups that run as one collective each.
std::vector<FusionGroup> fusionGroups(std::span<const Response> ready, size_t fusion_threshold);

}  // namespace hora::engine
