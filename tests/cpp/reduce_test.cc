// The element kernels against values computed here by hand: 16-bit rounding, NaN, integer
// wrap-around, Average's integer division and scaling.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "collectives/half.h"
#include "collectives/reduce.h"

namespace hora::collectives {
namespace {

TEST(Reduce, BFloat16RoundsToNearestEvenAndKeepsNaN) {
  // 1 + 2^-8 lies exactly between two bfloat16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(BFloat16::fromFloat(1.0f + 1.0f / 256), 0x3F80);
  // Just above the tie rounds up.
  EXPECT_EQ(BFloat16::fromFloat(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3F81);
  // 1 + 3 * 2^-8 is a tie between 0x3F81 and 0x3F82: goes to the even 0x3F82.
  EXPECT_EQ(BFloat16::fromFloat(1.0f + 3.0f / 256), 0x3F82);
  const uint16_t nan = BFloat16::fromFloat(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(BFloat16::toFloat(nan)));
  EXPECT_EQ(BFloat16::toFloat(BFloat16::fromFloat(-2.5f)), -2.5f);
}

TEST(Half, WideningMatchesTheCompilerForEveryHalf) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float want = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(h)));
    const float got = Half::toFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << std::hex << h;
    }
  }
}

TEST(Half, NarrowingMatchesTheCompilerAcrossFloat32) {
  // Every 997th float32 bit pattern (and its neighbours), covering normals, subnormals, ties,
  // overflow, infinities and NaNs of both signs.
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 997) {
    for (uint32_t bits : {static_cast<uint32_t>(b), static_cast<uint32_t>(b) | 0x1000u, static_cast<uint32_t>(b) & ~0x1FFFu}) {
      const float f = std::bit_cast<float>(bits);
      const uint16_t want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
      const uint16_t got = Half::fromFloat(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(std::isnan(static_cast<float>(std::bit_cast<_Float16>(got)))) << std::hex << bits;
      } else {
        ASSERT_EQ(got, want) << std::hex << bits << " = " << f;
      }
    }
  }
}

TEST(Reduce, Float16AccumulatesInFloat32) {
  // 2048 + 1 is not representable in float16 (spacing 2 there): one rounding, to even (2048).
  std::vector<uint16_t> a{Half::fromFloat(2048.0f), Half::fromFloat(0.5f)};
  std::vector<uint16_t> b{Half::fromFloat(1.0f), Half::fromFloat(0.25f)};
  reduce(DataType::kFloat16, ReduceOp::kSum, a.data(), a.data(), b.data(), 2);
  EXPECT_EQ(Half::toFloat(a[0]), 2048.0f);
  EXPECT_EQ(Half::toFloat(a[1]), 0.75f);
  std::vector<uint16_t> m{Half::fromFloat(-3.0f)}, n{Half::fromFloat(2.0f)};
  reduce(DataType::kFloat16, ReduceOp::kMin, m.data(), m.data(), n.data(), 1);
  EXPECT_EQ(Half::toFloat(m[0]), -3.0f);
}

TEST(Reduce, IntegersWrapInsteadOfOverflowing) {
  int8_t a[2] = {127, -128}, b[2] = {1, -1}, out[2];
  reduce(DataType::kInt8, ReduceOp::kSum, out, a, b, 2);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  uint8_t c[1] = {200}, d[1] = {2}, e[1];
  reduce(DataType::kUInt8, ReduceOp::kProduct, e, c, d, 1);
  EXPECT_EQ(e[0], 144);  // 400 mod 256
  int64_t big[1] = {INT64_MAX}, one[1] = {1}, r[1];
  reduce(DataType::kInt64, ReduceOp::kSum, r, big, one, 1);
  EXPECT_EQ(r[0], INT64_MIN);
}

TEST(Reduce, EveryOpOnEveryWidthOfALongUnalignedRun) {
  // Long enough for the vector loops, odd so the scalar tail runs, offset by one element.
  const size_t n = 1027;
  std::vector<float> a(n + 1), b(n + 1), out(n + 1);
  std::vector<double> da(n + 1), db(n + 1), dout(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    a[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
    b[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
    da[i] = a[i];
    db[i] = b[i];
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    reduce(DataType::kFloat32, op, out.data() + 1, a.data() + 1, b.data() + 1, n);
    reduce(DataType::kFloat64, op, dout.data() + 1, da.data() + 1, db.data() + 1, n);
    for (size_t i = 1; i <= n; ++i) {
      double want = 0;
      switch (op) {
        case ReduceOp::kSum: want = da[i] + db[i]; break;
        case ReduceOp::kMin: want = std::min(da[i], db[i]); break;
        case ReduceOp::kMax: want = std::max(da[i], db[i]); break;
        default: want = da[i] * db[i]; break;
      }
      ASSERT_EQ(out[i], static_cast<float>(want)) << "op " << static_cast<int>(op) << " i " << i;
      ASSERT_EQ(dout[i], want);
    }
  }
}

TEST(Reduce, FinalizeAveragesAndScales) {
  int32_t s[3] = {7, -7, 9};
  finalize(DataType::kInt32, ReduceOp::kAverage, s, s, 3, 2, 1.0);
  EXPECT_EQ(s[0], 3);   // integer division truncates toward zero
  EXPECT_EQ(s[1], -3);
  float f[2] = {3, 5};
  finalize(DataType::kFloat32, ReduceOp::kAverage, f, f, 2, 2, 10.0);
  EXPECT_EQ(f[0], 15.0f);
  int64_t g[1] = {5};
  scale(DataType::kInt64, g, g, 1, 0.5);  // 2.5 rounds to nearest (away from zero): 3
  EXPECT_EQ(g[0], 3);
  EXPECT_FALSE(needsFinalize(ReduceOp::kSum, 1.0, 4));
  EXPECT_TRUE(needsFinalize(ReduceOp::kAverage, 1.0, 4));
  EXPECT_FALSE(needsFinalize(ReduceOp::kAverage, 1.0, 1));
}

}  // namespace
}  // namespace hora::collectives
