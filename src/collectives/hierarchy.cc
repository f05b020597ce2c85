#include "collectives/hierarchy.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/reduce.h"
#include "hora/errors.h"

namespace hora::collectives {

std::unique_ptr<Hierarchy> Hierarchy::build(const bootstrap::Connection& world, const CommunicatorOptions& options) {
  if (!world.topology.evenHosts()) throw InternalError("hierarchical collectives need even hosts");
  const int n = world.size();
  auto by_host = world.topology.ranksByHost();
  const size_t per_host = by_host.begin()->second.size();
  const std::vector<int>& local = by_host[world.identity.hostname];
  std::vector<std::vector<int>> counterparts(per_host);
  std::vector<int> position(static_cast<size_t>(n));
  for (const auto& [h, ranks] : by_host) {
    for (size_t p = 0; p < per_host; ++p) {
      counterparts[p].push_back(ranks[p]);
      position[static_cast<size_t>(ranks[p])] = static_cast<int>(p);
    }
  }
  for (auto& c : counterparts) std::sort(c.begin(), c.end());
  const size_t mine_at = static_cast<size_t>(position[static_cast<size_t>(world.rank())]);
  Group local_group(bootstrap::connectSubset(world, local, "hierarchy-local-" + std::to_string(local.front()), options),
                    options);
  Group cross_group(
      bootstrap::connectSubset(world, counterparts[mine_at], "hierarchy-cross-" + std::to_string(mine_at), options),
      options);
  return std::unique_ptr<Hierarchy>(
      new Hierarchy(std::move(local_group), std::move(cross_group), std::move(counterparts), std::move(position)));
}

void Hierarchy::allreduce(const void* in, void* out, size_t count, DataType type, const AllreduceOptions& o,
                          int world_size) {
  const int slices = local_.size();
  std::vector<size_t> counts(static_cast<size_t>(slices));
  size_t offset = 0;
  for (int i = 0; i < slices; ++i) {
    counts[static_cast<size_t>(i)] = count / static_cast<size_t>(slices) + (static_cast<size_t>(i) < count % static_cast<size_t>(slices) ? 1 : 0);
    if (i < local_.rank()) offset += counts[static_cast<size_t>(i)];
  }
  const size_t elem = dataTypeSize(type);
  auto* slice = static_cast<std::byte*>(out) + offset * elem;
  const size_t my_count = counts[static_cast<size_t>(local_.rank())];
  // Sum in the steps; Average divides once, by every rank, at the end (as the flat ring does).
  AllreduceOptions step;
  step.op = o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op;
  Context scatter = local_.next(CollectiveKind::kReducescatter, "reducescatter");
  ringReduceScatter(scatter, static_cast<const std::byte*>(in), slice, counts, type, step);
  Context across = cross_.next(CollectiveKind::kAllreduce, "allreduce");
  const Plan plan = cross_.plan(CollectiveKind::kAllreduce, my_count, my_count * elem, step.op);
  collectives::allreduce(across, plan.algorithm, slice, slice, my_count, type, step);
  finalize(type, o.op, slice, slice, my_count, world_size, o.postscale);
  Context gather = local_.next(CollectiveKind::kAllgather, "allgather");
  ringAllgather(gather, slice, static_cast<std::byte*>(out), counts, type);
}


void Hierarchy::allgather(const void* in, void* out, std::span<const size_t> counts, DataType type) {
  const size_t elem = dataTypeSize(type);
  const auto count_of = [&](int rank) { return counts[static_cast<size_t>(rank)]; };
  // 1. This rank's block to its counterparts: `across_` holds the blocks of this position.
  const std::vector<int>& mine = counterparts_[static_cast<size_t>(local_.rank())];
  std::vector<size_t> cross_counts;
  size_t cross_total = 0;
  for (int r : mine) {
    cross_counts.push_back(count_of(r));
    cross_total += count_of(r);
  }
  across_.resize(cross_total * elem);
  Context across = cross_.next(CollectiveKind::kAllgather, "allgather");
  ringAllgather(across, static_cast<const std::byte*>(in), across_.data(), cross_counts, type);
  // 2. Every position's blocks to the whole host: `within_` holds them by position, then host.
  std::vector<size_t> local_counts;
  size_t total = 0;
  for (const auto& ranks : counterparts_) {
    size_t sum = 0;
    for (int r : ranks) sum += count_of(r);
    local_counts.push_back(sum);
    total += sum;
  }
  within_.resize(total * elem);
  Context within = local_.next(CollectiveKind::kAllgather, "allgather");
  ringAllgather(within, across_.data(), within_.data(), local_counts, type);
  // 3. Into rank order.
  std::vector<size_t> offset(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) offset[r + 1] = offset[r] + counts[r];
  const std::byte* from = within_.data();
  for (const auto& ranks : counterparts_) {
    for (int r : ranks) {
      const size_t bytes = count_of(r) * elem;
      if (bytes > 0) std::memcpy(static_cast<std::byte*>(out) + offset[static_cast<size_t>(r)] * elem, from, bytes);
      from += bytes;
    }
  }
}

void Hierarchy::broadcast(void* buffer, size_t count, DataType type, int root) {
  const size_t bytes = count * dataTypeSize(type);
  auto* data = static_cast<std::byte*>(buffer);
  const int root_position = position_[static_cast<size_t>(root)];
  if (local_.rank() == root_position) {
    const std::vector<int>& ranks = counterparts_[static_cast<size_t>(root_position)];
    const int cross_root = static_cast<int>(std::find(ranks.begin(), ranks.end(), root) - ranks.begin());
    Context across = cross_.next(CollectiveKind::kBroadcast, "broadcast");
    collectives::broadcast(across, cross_.plan(CollectiveKind::kBroadcast, count, bytes).algorithm, data, bytes, cross_root);
  }
  Context within = local_.next(CollectiveKind::kBroadcast, "broadcast");
  collectives::broadcast(within, local_.plan(CollectiveKind::kBroadcast, count, bytes).algorithm, data, bytes, root_position);
}

}  // namespace hora::collectives
