// The fusion policy (src/engine/fusion.h) alone, on hand-made ready lists: no communicator.
#include "engine/fusion.h"

#include <gtest/gtest.h>

namespace hora::engine {
namespace {

// A ready response of `elements` float32 elements (or `type`) on two ranks.
Response ready(CollectiveKind op, int64_t elements, DataType type = DataType::kFloat32) {
  RequestMeta m;
  m.name = std::to_string(elements);  // not "t" + ...: a GCC 12 -Wrestrict false positive
  m.op = op;
  m.type = type;
  m.shape = {elements};
  return Response{m.name, {m, m}, "", {}, -1};
}

Response allreduce(int64_t elements) { return ready(CollectiveKind::kAllreduce, elements); }

std::vector<FusionGroup> groups(const std::vector<Response>& r, size_t threshold = 128u << 20) {
  return fusionGroups(r, threshold);
}

TEST(Fusion, SmallAllreducesInARowRunAsOne) {
  EXPECT_EQ(groups({allreduce(10), allreduce(20), allreduce(30)}), (std::vector<FusionGroup>{{0, 3}}));
  EXPECT_TRUE(groups({}).empty());
}

TEST(Fusion, ThresholdEndsAGroup) {
  // 40 bytes each: two fit in 80 bytes, the third starts a new group.
  EXPECT_EQ(groups({allreduce(10), allreduce(10), allreduce(10)}, 80),
            (std::vector<FusionGroup>{{0, 2}, {2, 1}}));
}

TEST(Fusion, LargeTensorsRunAlone) {
  const int64_t large = static_cast<int64_t>(kFuseBelowBytes / 4);  // float32
  EXPECT_EQ(groups({allreduce(10), allreduce(large), allreduce(10), allreduce(10)}),
            (std::vector<FusionGroup>{{0, 1}, {1, 1}, {2, 2}}));
  EXPECT_EQ(groups({allreduce(large), allreduce(10)}), (std::vector<FusionGroup>{{0, 1}, {1, 1}}));
}

TEST(Fusion, OnlyAllreducesThatAgreeOnTypeOpScalesAndJoinedRanksFuse) {
  std::vector<Response> r{allreduce(1), ready(CollectiveKind::kAllreduce, 1, DataType::kFloat64)};
  EXPECT_EQ(groups(r).size(), 2u);
  r = {allreduce(1), allreduce(1)};
  for (auto& m : r[1].metas) m.reduce_op = ReduceOp::kMax;
  EXPECT_EQ(groups(r).size(), 2u);
  r = {allreduce(1), allreduce(1)};
  for (auto& m : r[1].metas) m.postscale = 0.5;
  EXPECT_EQ(groups(r).size(), 2u);
  r = {allreduce(1), allreduce(1)};
  r[1].joined = {1};
  EXPECT_EQ(groups(r).size(), 2u);
}

TEST(Fusion, OtherCollectivesAndErrorsAreGroupsOfTheirOwn) {
  Response failed = allreduce(2);
  failed.error = "Tensor '2': mismatch";
  EXPECT_EQ(groups({allreduce(1), ready(CollectiveKind::kBroadcast, 1), ready(CollectiveKind::kBroadcast, 1),
                    allreduce(1), failed, allreduce(1)}),
            (std::vector<FusionGroup>{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}}));
}

}  // namespace
}  // namespace hora::engine
