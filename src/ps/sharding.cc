#include "ps/sharding.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "hora/errors.h"

namespace hora::ps {

size_t ShardPlan::shardElements(size_t server) const {
  size_t n = 0;
  for (const Piece& p : servers.at(server)) n += p.count;
  return n;
}

ShardLayout ShardPlan::layout(size_t server) const {
  ShardLayout layout;
  for (const Piece& p : servers.at(server)) (p.wide ? layout.wide : layout.narrow) += p.count;
  return layout;
}

size_t ShardLayout::byteOf(size_t element) const {
  if (element <= wide) return element * sizeof(double);
  return wide * sizeof(double) + (element - wide) * sizeof(float);
}

size_t ShardLayout::elementAt(size_t byte) const {
  const size_t wide_bytes = wide * sizeof(double);
  const size_t element = byte <= wide_bytes ? byte / sizeof(double) : wide + (byte - wide_bytes) / sizeof(float);
  return element <= elements() && byteOf(element) == byte ? element : SIZE_MAX;
}

ShardPlan planShards(const std::vector<size_t>& tensor_elements, int servers, const std::vector<PsDtype>& dtypes) {
  if (servers < 1) throw InvalidArgumentError("parameter servers: need at least 1 server, got " + std::to_string(servers));
  if (!dtypes.empty() && dtypes.size() != tensor_elements.size())
    throw InvalidArgumentError("parameter servers: " + std::to_string(dtypes.size()) + " dtypes for " +
                               std::to_string(tensor_elements.size()) + " tensors");
  const size_t k = static_cast<size_t>(servers);
  const auto wide = [&](size_t t) { return !dtypes.empty() && dtypes[t] == PsDtype::kFloat64; };
  // Balanced by bytes, not elements: a float64 element costs a server twice a float32 one in
  // memory, on the wire and in its loops.
  const auto width = [&](size_t t) { return wide(t) ? sizeof(double) : sizeof(float); };
  const auto bytes = [&](size_t t) { return tensor_elements[t] * width(t); };
  size_t total = 0;
  for (size_t t = 0; t < tensor_elements.size(); ++t) total += bytes(t);
  ShardPlan plan;
  plan.servers.resize(k);
  std::vector<size_t> load(k, 0);  // bytes
  // Largest first (stable: equal sizes keep their order), so that the greedy placement balances.
  std::vector<size_t> order(tensor_elements.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes(a) > bytes(b); });
  for (size_t t : order) {
    const size_t n = tensor_elements[t];
    if (k > 1 && bytes(t) * k > total) {
      // Larger than a server's fair share: every server takes a piece.
      size_t offset = 0;
      for (size_t s = 0; s < k; ++s) {
        const size_t count = n / k + (s < n % k ? 1 : 0);
        if (count > 0) plan.servers[s].push_back({t, offset, count, wide(t)});
        load[s] += count * width(t);
        offset += count;
      }
      continue;
    }
    const size_t s = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    plan.servers[s].push_back({t, 0, n, wide(t)});
    load[s] += bytes(t);
  }
  // Last registered first: a backward pass produces gradients in about the reverse of the
  // forward's order, so a shard's prefix is ready early (Note [overlapped pushes], client.cc).
  // float64 pieces before float32 ones (ShardLayout).
  for (auto& pieces : plan.servers)
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.wide != b.wide ? a.wide : a.tensor > b.tensor; });
  return plan;
}

uint64_t layoutHash(const std::vector<size_t>& tensor_elements, const std::vector<PsDtype>& dtypes) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(tensor_elements.size());
  for (size_t n : tensor_elements) mix(n);
  // float64 tensors only, so that an all-float32 list hashes as it did before dtypes existed.
  for (size_t t = 0; t < dtypes.size(); ++t)
    if (dtypes[t] == PsDtype::kFloat64) mix(t);
  return h;
}

}  // namespace hora::ps
