#include "engine/fusion.h"

namespace hora::engine {
namespace {

size_t bytesOf(const RequestMeta& m) { return static_cast<size_t>(m.elements()) * dataTypeSize(m.type); }

bool isAllreduce(const Response& r) { return r.error.empty() && r.metas[0].op == CollectiveKind::kAllreduce; }

// Whether `next` may share one allreduce with `head`: same type, reduce op, scales and joined ranks.
bool fusible(const Response& head, const Response& next) {
  if (!isAllreduce(next)) return false;
  const RequestMeta& a = head.metas[0];
  const RequestMeta& b = next.metas[0];
  return a.type == b.type && a.reduce_op == b.reduce_op && a.prescale == b.prescale &&
         a.postscale == b.postscale && head.joined == next.joined;
}

// One past the last response of the fused allreduce that starts at ready[first].
size_t endOfAllreduceGroup(std::span<const Response> ready, size_t first, size_t fusion_threshold) {
  size_t bytes = bytesOf(ready[first].metas[0]);
  size_t end = first + 1;
  for (; end < ready.size() && bytes < kFuseBelowBytes; ++end) {
    if (!fusible(ready[first], ready[end])) break;
    const size_t more = bytesOf(ready[end].metas[0]);
    if (more >= kFuseBelowBytes || bytes + more > fusion_threshold) break;
    bytes += more;
  }
  return end;
}

}  // namespace

std::vector<FusionGroup> fusionGroups(std::span<const Response> ready, size_t fusion_threshold) {
  std::vector<FusionGroup> groups;
  size_t first = 0;
  while (first < ready.size()) {
    const size_t end = isAllreduce(ready[first]) ? endOfAllreduceGroup(ready, first, fusion_threshold) : first + 1;
    groups.push_back({first, end - first});
    first = end;
  }
  return groups;
}

}  // namespace hora::engine
