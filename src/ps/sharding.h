// Sharding: which parameter server holds which elements of which tensor.
//
// Workers register the same tensors (element counts, in a fixed order). With T elements in all
// over K servers, a tensor of more than T / K elements is split into K contiguous pieces, one per
// server (their sizes differ by at most one); the other tensors, largest first, go whole to the
// server holding the fewest elements so far (ties: the lowest server). A server's shard is its
// pieces in reverse tensor order (the order a backward pass produces gradients in, about): the
// order a push's parts and a reply's floats follow.
//
// A pure function of (counts, K): every worker computes the same plan, and layoutHash() lets a
// server refuse a worker that registers other tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hora::ps {

struct Piece {
  size_t tensor = 0;  // index in the registered list
  size_t offset = 0;  // first element of the tensor this piece holds
  size_t count = 0;   // elements
};

struct ShardPlan {
  std::vector<std::vector<Piece>> servers;  // by server: its pieces in shard order

  size_t shardElements(size_t server) const;
};

// InvalidArgumentError when servers < 1.
ShardPlan planShards(const std::vector<size_t>& tensor_elements, int servers);

// FNV-1a over the counts: equal for equal lists.
uint64_t layoutHash(const std::vector<size_t>& tensor_elements);

}  // namespace hora::ps
