#include "collectives/hierarchy.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "collectives/reduce.h"

namespace hora::collectives {

std::unique_ptr<Hierarchy> Hierarchy::build(Communicator& world) {
  const Identity& id = world.identity();
  // Which host every rank is on (launchers need not place ranks host by host): every rank
  // contributes a number for its hostname, the name that told the hosts apart in the first place.
  const int n = world.size();
  std::vector<int32_t> host(static_cast<size_t>(n));
  const int32_t mine = static_cast<int32_t>(std::hash<std::string>{}(id.hostname) & 0x7fffffff);
  const std::vector<size_t> ones(static_cast<size_t>(n), 1);
  world.allgather(&mine, 1, host.data(), ones, DataType::kInt32);
  std::map<int32_t, std::vector<int>> by_host;  // ascending ranks of each host
  for (int r = 0; r < n; ++r) by_host[host[static_cast<size_t>(r)]].push_back(r);
  const size_t per_host = by_host.begin()->second.size();
  for (const auto& [h, ranks] : by_host) {
    if (ranks.size() != per_host) return nullptr;  // uneven hosts
  }
  if (by_host.size() <= 1 || per_host <= 1) return nullptr;
  const std::vector<int>& local = by_host[mine];
  const size_t position = static_cast<size_t>(std::find(local.begin(), local.end(), world.rank()) - local.begin());
  std::vector<int> cross;
  for (const auto& [h, ranks] : by_host) cross.push_back(ranks[position]);
  std::sort(cross.begin(), cross.end());
  auto local_comm = world.split(local, "hierarchy-local-" + std::to_string(local.front()));
  auto cross_comm = world.split(cross, "hierarchy-cross-" + std::to_string(position));
  return std::unique_ptr<Hierarchy>(new Hierarchy(std::move(local_comm), std::move(cross_comm)));
}

void Hierarchy::allreduce(const void* in, void* out, size_t count, DataType type, const AllreduceOptions& o,
                          int world_size) {
  const int slices = local_->size();
  std::vector<size_t> counts(static_cast<size_t>(slices));
  size_t offset = 0;
  for (int i = 0; i < slices; ++i) {
    counts[static_cast<size_t>(i)] = count / static_cast<size_t>(slices) + (static_cast<size_t>(i) < count % static_cast<size_t>(slices) ? 1 : 0);
    if (i < local_->rank()) offset += counts[static_cast<size_t>(i)];
  }
  const size_t elem = dataTypeSize(type);
  auto* slice = static_cast<std::byte*>(out) + offset * elem;
  const size_t my_count = counts[static_cast<size_t>(local_->rank())];
  // Sum in the steps; Average divides once, by every rank, at the end (as the flat ring does).
  AllreduceOptions step;
  step.op = o.op == ReduceOp::kAverage ? ReduceOp::kSum : o.op;
  local_->reducescatter(in, slice, counts, type, step);
  cross_->allreduce(slice, slice, my_count, type, step);
  finalize(type, o.op, slice, slice, my_count, world_size, o.postscale);
  local_->allgather(slice, my_count, out, counts, type);
}

}  // namespace hora::collectives
