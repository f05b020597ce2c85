// Sharding: which parameter server holds which elements of which tensor.
//
// Workers register the same tensors (element counts and types, in a fixed order). With B bytes in
// all over K servers, a tensor of more than B / K bytes is split into K contiguous pieces, one per
// server (their element counts differ by at most one); the other tensors, largest first, go whole
// to the server holding the fewest bytes so far (ties: the lowest server). A server's shard is its
// pieces in reverse tensor order (the order a backward pass produces gradients in, about): the
// order a push's parts and a reply's values follow, but that a shard's float64 pieces come before
// its float32 ones (ShardLayout).
//
// A pure function of (counts, K): every worker computes the same plan, and layoutHash() lets a
// server refuse a worker that registers other tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hora/ps.h"

namespace hora::ps {

struct Piece {
  size_t tensor = 0;  // index in the registered list
  size_t offset = 0;  // first element of the tensor this piece holds
  size_t count = 0;   // elements
  bool wide = false;  // of a float64 tensor
};

// A shard's elements as every buffer and payload holds them: its `wide` float64 elements first,
// then its `narrow` float32 ones, so that the doubles start 8-byte aligned wherever the buffer
// does and each kind is one contiguous array for the server's loops.
struct ShardLayout {
  size_t wide = 0;
  size_t narrow = 0;

  size_t elements() const { return wide + narrow; }
  size_t bytes() const { return byteOf(elements()); }
  // Where element `element` begins.
  size_t byteOf(size_t element) const;
  // The element that begins at byte `byte`, or SIZE_MAX when none does (inside an element, or
  // past the end).
  size_t elementAt(size_t byte) const;
};

struct ShardPlan {
  std::vector<std::vector<Piece>> servers;  // by server: its pieces in shard order

  size_t shardElements(size_t server) const;
  ShardLayout layout(size_t server) const;
};

// InvalidArgumentError when servers < 1. `dtypes`: by tensor (empty: all float32).
ShardPlan planShards(const std::vector<size_t>& tensor_elements, int servers, const std::vector<PsDtype>& dtypes = {});

// FNV-1a over the counts and dtypes: equal for equal lists.
uint64_t layoutHash(const std::vector<size_t>& tensor_elements, const std::vector<PsDtype>& dtypes = {});

}  // namespace hora::ps
