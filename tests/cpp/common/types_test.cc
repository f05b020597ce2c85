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

TEST(Types, EveryDataTypeHasANameASizeAndAValueThatNeverChanges) {
  // The values are the C ABI's and the wire's: new types are appended, never renumbered.
  struct Expected {
    DataType type;
    int value;
    std::string name;
    size_t size;
    bool floating;
  };
  const Expected types[] = {{DataType::kUInt8, 0, "uint8", 1, false},     {DataType::kInt8, 1, "int8", 1, false},
                            {DataType::kInt32, 2, "int32", 4, false},     {DataType::kInt64, 3, "int64", 8, false},
                            {DataType::kFloat16, 4, "float16", 2, true},  {DataType::kBFloat16, 5, "bfloat16", 2, true},
                            {DataType::kFloat32, 6, "float32", 4, true},  {DataType::kFloat64, 7, "float64", 8, true},
                            {DataType::kInt16, 8, "int16", 2, false},     {DataType::kBool, 9, "bool", 1, false}};
  ASSERT_EQ(std::size(types), static_cast<size_t>(kNumDataTypes));
  for (const Expected& e : types) {
    EXPECT_EQ(static_cast<int>(e.type), e.value) << e.name;
    EXPECT_EQ(toString(e.type), e.name);
    EXPECT_EQ(parseDataType(e.name), e.type);
    EXPECT_EQ(dataTypeSize(e.type), e.size) << e.name;
    EXPECT_EQ(isFloatingPoint(e.type), e.floating) << e.name;
  }
  EXPECT_EQ(parseDataType("short"), DataType::kInt16);
  EXPECT_EQ(parseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(parseDataType("uint16"), std::nullopt);
  EXPECT_EQ(toString(static_cast<DataType>(kNumDataTypes)), "unknown");
}

}  // namespace
}  // namespace hora
