// The names of the shared enums (include/hora/types.h) and their parsers.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "hora/types.h"

namespace hora {
namespace {

TEST(Types, EveryCollectiveKindHasOneNameThatParsesBack) {
  const std::string names[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "join", "barrier"};
  ASSERT_EQ(std::size(names), static_cast<size_t>(kNumCollectiveKinds));
  std::set<int> values;
  for (int i = 0; i < kNumCollectiveKinds; ++i) {
    const auto kind = static_cast<CollectiveKind>(i);
    EXPECT_EQ(toString(kind), names[i]);
    EXPECT_EQ(parseCollectiveKind(names[i]), kind);
    values.insert(static_cast<int>(kind));
  }
  EXPECT_EQ(values.size(), static_cast<size_t>(kNumCollectiveKinds));
  EXPECT_EQ(parseCollectiveKind("Allreduce"), std::nullopt);
  EXPECT_EQ(parseCollectiveKind(""), std::nullopt);
  EXPECT_EQ(toString(static_cast<CollectiveKind>(kNumCollectiveKinds)), "unknown");
}

}  // namespace
}  // namespace hora
