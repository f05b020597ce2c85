// Parameter servers' sharding plan (src/ps/sharding.h, docs/parameter_servers.md "Sharding"):
// which server holds which piece of which tensor, balanced by bytes.

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "hora/errors.h"
#include "hora/ps.h"
#include "ps/sharding.h"

namespace hora::testing {
namespace {

// Every element of every tensor is held by exactly one server.
void expectCoversOnce(const ps::ShardPlan& plan, const std::vector<size_t>& sizes) {
  std::vector<std::vector<int>> held(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) held[t].assign(sizes[t], 0);
  for (const auto& pieces : plan.servers)
    for (const ps::Piece& p : pieces)
      for (size_t i = 0; i < p.count; ++i) ++held[p.tensor][p.offset + i];
  for (size_t t = 0; t < sizes.size(); ++t)
    for (size_t i = 0; i < sizes[t]; ++i) ASSERT_EQ(held[t][i], 1) << "tensor " << t << " element " << i;
}

TEST(PsSharding, LargeTensorsAreSplitAcrossEveryServer) {
  const std::vector<size_t> sizes = {7, 1001, 3, 0, 50};
  const auto plan = ps::planShards(sizes, 3);
  expectCoversOnce(plan, sizes);
  for (size_t s = 0; s < 3; ++s) {
    ASSERT_FALSE(plan.servers[s].empty());
    const auto large = std::find_if(plan.servers[s].begin(), plan.servers[s].end(),
                                    [](const ps::Piece& p) { return p.tensor == 1; });
    ASSERT_NE(large, plan.servers[s].end()) << "server " << s << " holds no piece of the large tensor";
    EXPECT_NEAR(static_cast<double>(large->count), 1001.0 / 3, 1.0);
    for (size_t i = 1; i < plan.servers[s].size(); ++i)
      EXPECT_GT(plan.servers[s][i - 1].tensor, plan.servers[s][i].tensor) << "server " << s << ": last registered first";
  }
}

TEST(PsSharding, SmallTensorsAreBalanced) {
  const std::vector<size_t> sizes = {10, 5, 10, 10, 5, 10};
  const auto plan = ps::planShards(sizes, 2);
  expectCoversOnce(plan, sizes);
  EXPECT_EQ(plan.shardElements(0), 25u);
  EXPECT_EQ(plan.shardElements(1), 25u);
  for (const auto& pieces : plan.servers)
    for (const ps::Piece& p : pieces) EXPECT_EQ(p.count, sizes[p.tensor]) << "small tensors stay whole";
}

// float64 pieces come first in every shard (ShardLayout), and the dtypes are part of the layout.
TEST(PsSharding, Float64PiecesComeFirstAndDtypesChangeTheLayout) {
  using D = PsDtype;
  const std::vector<size_t> sizes = {10, 400, 7, 300};
  const std::vector<D> dtypes = {D::kFloat64, D::kFloat32, D::kFloat32, D::kFloat64};
  const auto plan = ps::planShards(sizes, 2, dtypes);
  expectCoversOnce(plan, sizes);
  for (size_t k = 0; k < 2; ++k) {
    const auto& pieces = plan.servers[k];
    const auto first_narrow = std::find_if(pieces.begin(), pieces.end(), [](const ps::Piece& p) { return !p.wide; });
    EXPECT_TRUE(std::none_of(first_narrow, pieces.end(), [](const ps::Piece& p) { return p.wide; })) << "server " << k;
    for (const ps::Piece& p : pieces) EXPECT_EQ(p.wide, dtypes[p.tensor] == D::kFloat64);
    const ps::ShardLayout layout = plan.layout(k);
    EXPECT_EQ(layout.elements(), plan.shardElements(k));
    EXPECT_EQ(layout.bytes(), layout.wide * 8 + layout.narrow * 4);
    EXPECT_EQ(layout.elementAt(layout.byteOf(layout.wide + 1)), layout.wide + 1);
    if (layout.wide > 0) {
      EXPECT_EQ(layout.elementAt(4), SIZE_MAX);  // inside the first double
    }
  }
  EXPECT_NE(ps::layoutHash(sizes, dtypes), ps::layoutHash(sizes));
  EXPECT_EQ(ps::layoutHash(sizes, std::vector<D>(4, D::kFloat32)), ps::layoutHash(sizes));
  EXPECT_THROW(ps::planShards(sizes, 2, {D::kFloat64}), InvalidArgumentError);
}

// Servers are balanced by bytes: by elements, {30 float64, 30, 30} would put the first two on
// server 0 (360 bytes against 120); and a float64 tensor is split when its bytes exceed a
// server's share, though its elements do not.
TEST(PsSharding, Float64TensorsWeighTheirBytes) {
  using D = PsDtype;
  const std::vector<size_t> sizes = {30, 30, 30};
  const auto plan = ps::planShards(sizes, 2, {D::kFloat64, D::kFloat32, D::kFloat32});
  expectCoversOnce(plan, sizes);
  EXPECT_EQ(plan.layout(0).bytes(), 240u);
  EXPECT_EQ(plan.layout(1).bytes(), 240u);
  // 100 float64 elements are 800 of 1,200 bytes: more than a server's 600, so split in two.
  const std::vector<size_t> split = {100, 100};
  const auto halves = ps::planShards(split, 2, {D::kFloat64, D::kFloat32});
  expectCoversOnce(halves, split);
  for (size_t s = 0; s < 2; ++s) {
    const auto wide = std::find_if(halves.servers[s].begin(), halves.servers[s].end(),
                                   [](const ps::Piece& p) { return p.tensor == 0; });
    ASSERT_NE(wide, halves.servers[s].end()) << "server " << s << " holds no piece of the float64 tensor";
    EXPECT_EQ(wide->count, 50u);
  }
}

// Compression.fp16 takes float32 tensors only: a float64 one is refused before connecting, by
// its index.
TEST(PsSharding, Fp16CompressionOfAFloat64TensorIsRefused) {
  PsJob job;
  job.servers = 1;
  PsOptions options;
  options.fp16 = true;
  options.dtypes = {PsDtype::kFloat32, PsDtype::kFloat64};
  try {
    ParameterServerClient client(job, {3, 4}, options);
    ADD_FAILURE() << "fp16 of a float64 tensor was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 1 is float64"), std::string::npos) << e.what();
  }
}

TEST(PsSharding, OneServerHoldsEverythingWholeAndLayoutsDiffer) {
  const auto plan = ps::planShards({5, 100, 2}, 1);
  EXPECT_EQ(plan.shardElements(0), 107u);
  EXPECT_EQ(plan.servers[0].size(), 3u);
  EXPECT_THROW(ps::planShards({1}, 0), InvalidArgumentError);
  EXPECT_NE(ps::layoutHash({5, 100}), ps::layoutHash({100, 5}));
  EXPECT_EQ(ps::layoutHash({5, 100}), ps::layoutHash({5, 100}));
}

}  // namespace
}  // namespace hora::testing
