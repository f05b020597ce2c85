// The integer and bool kernels, and the scaling arithmetic of hora/options.h (Horovod's on the
// CPU: integers multiplied in double and truncated toward zero, Average as a postscale of
// postscale / n), against values worked out here by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "collectives/reduce.h"
#include "hora/errors.h"

namespace hora::collectives {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

TEST(ReduceIntegers, WrapInsteadOfOverflowing) {
  int8_t a[2] = {127, -128}, b[2] = {1, -1}, out[2];
  reduce(DataType::kInt8, ReduceOp::kSum, out, a, b, 2);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  uint8_t c[1] = {200}, d[1] = {2}, e[1];
  reduce(DataType::kUInt8, ReduceOp::kProduct, e, c, d, 1);
  EXPECT_EQ(e[0], 144);  // 400 mod 256
  int16_t f[2] = {32767, 300}, g[2] = {1, 300}, h[2];
  reduce(DataType::kInt16, ReduceOp::kSum, h, f, g, 1);
  EXPECT_EQ(h[0], -32768);
  reduce(DataType::kInt16, ReduceOp::kProduct, h, f, g, 2);
  EXPECT_EQ(h[0], 32767);
  EXPECT_EQ(h[1], 24464);  // 90000 - 65536
  int64_t big[1] = {INT64_MAX}, one[1] = {1}, r[1];
  reduce(DataType::kInt64, ReduceOp::kSum, r, big, one, 1);
  EXPECT_EQ(r[0], INT64_MIN);
}

// A 16-bit integer as the kernels must leave it: the low 16 bits of the exact result.
int16_t low16(int64_t exact) { return static_cast<int16_t>(static_cast<uint16_t>(exact & 0xFFFF)); }

TEST(ReduceIntegers, Int16EveryOpOnALongUnalignedRun) {
  // Long enough for the vector loops, odd so the scalar tail runs, offset by one element; the
  // values span the whole range, so sums and products wrap.
  const size_t n = 1027;
  std::vector<int16_t> a(n + 1), b(n + 1), out(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    a[i] = low16(static_cast<int64_t>(i) * 2897 - 30000);
    b[i] = low16(static_cast<int64_t>(i) * -613 + 12345);
  }
  for (ReduceOp op : kOps) {
    reduce(DataType::kInt16, op, out.data() + 1, a.data() + 1, b.data() + 1, n);
    for (size_t i = 1; i <= n; ++i) {
      const int64_t x = a[i], y = b[i];
      int64_t want = 0;
      switch (op) {
        case ReduceOp::kSum: case ReduceOp::kAverage: want = x + y; break;  // Average sums too
        case ReduceOp::kMin: want = std::min(x, y); break;
        case ReduceOp::kMax: want = std::max(x, y); break;
        case ReduceOp::kProduct: want = x * y; break;
        case ReduceOp::kAdasum: break;  // not element-wise, not in kOps
      }
      ASSERT_EQ(out[i], low16(want)) << toString(op) << " element " << i << ": " << x << ", " << y;
    }
  }
}

TEST(ReduceBool, IsLogicalForEveryPairOfBytes) {
  // Every pair of these bytes, repeated past the vector width: any non-zero byte is true, and
  // every result is 0 or 1.
  const uint8_t bytes[] = {0, 1, 2, 0x80, 0xFF};
  std::vector<uint8_t> a, b;
  for (int repeat = 0; repeat < 41; ++repeat)
    for (uint8_t x : bytes)
      for (uint8_t y : bytes) {
        a.push_back(x);
        b.push_back(y);
      }
  std::vector<uint8_t> out(a.size());
  for (ReduceOp op : kOps) {
    reduce(DataType::kBool, op, out.data(), a.data(), b.data(), a.size());
    const bool is_and = op == ReduceOp::kProduct || op == ReduceOp::kMin;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool x = a[i] != 0, y = b[i] != 0;
      ASSERT_EQ(out[i], (is_and ? x && y : x || y) ? 1 : 0)
          << toString(op) << ": " << int{a[i]} << ", " << int{b[i]};
    }
  }
}

TEST(Scale, IntegersAreMultipliedInDoubleAndTruncatedTowardZero) {
  int32_t i32[4] = {5, -5, 7, 1};
  scale(DataType::kInt32, i32, i32, 4, 0.5);
  EXPECT_EQ(std::vector<int32_t>(i32, i32 + 4), (std::vector<int32_t>{2, -2, 3, 0}));
  int64_t i64[2] = {5, -9};
  scale(DataType::kInt64, i64, i64, 2, 0.7);  // 3.5 and -6.3
  EXPECT_EQ(i64[0], 3);
  EXPECT_EQ(i64[1], -6);
  // Results outside the type wrap into its width, as integer sums do.
  uint8_t u8[1] = {200};
  scale(DataType::kUInt8, u8, u8, 1, 1.5);  // 300
  EXPECT_EQ(u8[0], 44);
  int8_t i8[1] = {100};
  scale(DataType::kInt8, i8, i8, 1, -2.0);  // -200
  EXPECT_EQ(i8[0], 56);
  int16_t i16[2] = {30000, -7};
  scale(DataType::kInt16, i16, i16, 2, 2.5);  // 75000 and -17.5
  EXPECT_EQ(i16[0], 75000 - 65536);
  EXPECT_EQ(i16[1], -17);
  // Beyond int64's range the result saturates instead of being undefined.
  int64_t huge[2] = {3, -3};
  scale(DataType::kInt64, huge, huge, 2, 1e300);
  EXPECT_EQ(huge[0], INT64_MAX);
  EXPECT_EQ(huge[1], INT64_MIN);
  uint8_t flag[1] = {1};
  EXPECT_THROW(scale(DataType::kBool, flag, flag, 1, 2.0), InvalidArgumentError);
}

TEST(Finalize, AverageIsAPostscaleByPostscaleOverTheRanks) {
  int32_t s[3] = {7, -7, 9};
  finalize(DataType::kInt32, ReduceOp::kAverage, s, s, 3, 2, 1.0);
  EXPECT_EQ(std::vector<int32_t>(s, s + 3), (std::vector<int32_t>{3, -3, 4}));
  // One multiplication, not a division and then a scaling: 7 * (3 / 3) is 7, where 7 / 3 * 3
  // in integers would be 6.
  int32_t t[1] = {7};
  finalize(DataType::kInt32, ReduceOp::kAverage, t, t, 1, 3, 3.0);
  EXPECT_EQ(t[0], 7);
  // 0.6 / 3 is 0.19999999999999998 in double, so 10 of it truncates to 1 (Horovod's result),
  // where 10 * 0.6 / 3 would give 2.
  int16_t u[1] = {10};
  finalize(DataType::kInt16, ReduceOp::kAverage, u, u, 1, 3, 0.6);
  EXPECT_EQ(u[0], 1);
  int64_t v[2] = {10, 10};
  finalize(DataType::kInt64, ReduceOp::kSum, v, v, 2, 3, 0.6);  // Sum ignores the rank count
  EXPECT_EQ(v[0], 6);
  float f[2] = {3, 5};
  finalize(DataType::kFloat32, ReduceOp::kAverage, f, f, 2, 2, 10.0);
  EXPECT_EQ(f[0], 15.0f);
  EXPECT_EQ(f[1], 25.0f);
  EXPECT_FALSE(needsFinalize(ReduceOp::kSum, 1.0, 4));
  EXPECT_TRUE(needsFinalize(ReduceOp::kAverage, 1.0, 4));
  EXPECT_FALSE(needsFinalize(ReduceOp::kAverage, 1.0, 1));
}

TEST(Reducible, RefusesWhatHasNoMeaningAndNamesWhy) {
  EXPECT_EQ(whyNotReducible(DataType::kInt16, {ReduceOp::kAverage, 0.5, 3.0}), "");
  EXPECT_EQ(whyNotReducible(DataType::kBool, {ReduceOp::kProduct, 1.0, 1.0}), "");
  EXPECT_NE(whyNotReducible(DataType::kBool, {ReduceOp::kAverage, 1.0, 1.0}).find("bool tensors cannot be averaged"),
            std::string::npos);
  EXPECT_NE(whyNotReducible(DataType::kBool, {ReduceOp::kSum, 2.0, 1.0}).find("cannot be scaled"), std::string::npos);
  EXPECT_NE(whyNotReducible(DataType::kBool, {ReduceOp::kMax, 1.0, 0.5}).find("cannot be scaled"), std::string::npos);
  EXPECT_EQ(whyNotReducible(static_cast<DataType>(kNumDataTypes), {}), "unknown data type 10");
  EXPECT_EQ(whyNotReducible(DataType::kInt32, {static_cast<ReduceOp>(9), 1.0, 1.0}), "unknown reduce op 9");
  EXPECT_EQ(whyNotReducible(DataType::kFloat32, {ReduceOp::kSum, std::numeric_limits<double>::infinity(), 1.0}),
            "prescale factor is not finite");
}

}  // namespace
}  // namespace hora::collectives
