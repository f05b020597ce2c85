// The floating-point element kernels against values computed here by hand: 16-bit rounding and
// NaN (the integer and bool kernels and integer scaling are reduce_integer_test.cc's). The
// float16 and bfloat16 kernels of every instruction set are checked bit for bit against a
// reference written here, element by element.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/half.h"
#include "collectives/reduce.h"
#include "collectives/reduce16.h"

namespace hora::collectives {
namespace {
using common::BFloat16;
using common::Half;

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

// A plain Average of float32 and float64 is the correctly rounded quotient sum / n (the
// compiler's division), at every rank count that is not a power of two too; a postscale keeps
// Horovod's multiplication by postscale / n.
TEST(Reduce, FinalizeAverageOfFloatsIsTheCorrectlyRoundedQuotient) {
  for (int n : {2, 3, 5, 6, 7, 9, 12}) {
    std::vector<float> sum32;
    std::vector<double> sum64;
    for (int v = -3000; v < 3000; ++v) {
      sum32.push_back(static_cast<float>(v) * 0.37f);
      sum64.push_back(static_cast<double>(v) * 0.37);
    }
    std::vector<float> out32(sum32.size());
    std::vector<double> out64(sum64.size());
    finalize(DataType::kFloat32, ReduceOp::kAverage, out32.data(), sum32.data(), sum32.size(), n, 1.0);
    finalize(DataType::kFloat64, ReduceOp::kAverage, out64.data(), sum64.data(), sum64.size(), n, 1.0);
    for (size_t i = 0; i < sum32.size(); ++i) {
      ASSERT_EQ(out32[i], sum32[i] / static_cast<float>(n)) << "n " << n << " sum " << sum32[i];
      ASSERT_EQ(out64[i], sum64[i] / static_cast<double>(n)) << "n " << n << " sum " << sum64[i];
    }
    finalize(DataType::kFloat32, ReduceOp::kAverage, out32.data(), sum32.data(), sum32.size(), n, 2.0);
    for (size_t i = 0; i < sum32.size(); ++i)
      ASSERT_EQ(out32[i], sum32[i] * static_cast<float>(2.0 / n)) << "n " << n << " postscale 2";
  }
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

// ---- float16 and bfloat16: every kernel against a reference, bit for bit ----

// The reference, written without half.h: float16 converts through the compiler's _Float16 (in
// this baseline-compiled file, libgcc's software conversion, rounding to nearest even),
// bfloat16 by hand with a branch per case. A NaN result is written as the kernels document it
// (reduce16.h): sign kept, quiet, payload dropped (float16) or truncated (bfloat16).
float widenHalf(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

uint16_t narrowHalf(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xFE00 : 0x7E00;
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}

float widenBFloat16(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

uint16_t narrowBFloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t kept = u >> 16;
  const uint32_t dropped = u & 0xFFFFu;
  if (std::isnan(f)) return static_cast<uint16_t>(kept | 0x0040u);
  const bool up = dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u) != 0);
  return static_cast<uint16_t>(kept + (up ? 1u : 0u));  // 0x7F7F + 1 is infinity, as it should
}

struct Format {
  DataType type;
  const char* name;
  float (*widen)(uint16_t);
  uint16_t (*narrow)(float);
  int mantissa_bits;
  uint16_t exponent_bias;
  std::vector<uint16_t> specials;
};

// Zeros, the smallest and largest subnormals, the smallest normal, 1 and its neighbour, halves
// and quarters of an ulp of 1 (sums that tie), powers of two whose products are subnormal or
// tie there, the largest finite values (sums that overflow, or tie at the overflow boundary),
// infinities, and NaNs: quiet, signaling, with payloads, of both signs.
const Format kHalf{DataType::kFloat16, "float16", widenHalf, narrowHalf, 10, 15,
                   {0x0000, 0x8000, 0x0001, 0x8001, 0x0003, 0x03FF, 0x83FF, 0x0400, 0x3C00, 0xBC00,
                    0x3C01, 0x3C03, 0x1000, 0x1400, 0x0C00, 0x0800, 0x4200, 0x6800, 0x6801, 0x4C00,
                    0x7BFF, 0xFBFF, 0x7BFE, 0x5000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFD55,
                    0x7FFF, 0x7E01}};
const Format kBFloat16{DataType::kBFloat16, "bfloat16", widenBFloat16, narrowBFloat16, 7, 127,
                       {0x0000, 0x8000, 0x0001, 0x8001, 0x0003, 0x007F, 0x807F, 0x0080, 0x3F80, 0xBF80,
                        0x3F81, 0x3F83, 0x3B80, 0x3C00, 0x1F80, 0x2000, 0x4040, 0x4B00, 0x4B01, 0x4180,
                        0x7F7F, 0xFF7F, 0x7F7E, 0x7F00, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFFAA,
                        0x7FFF, 0x7FC1}};
const Format* const kFormats[] = {&kHalf, &kBFloat16};

float quiet(float nan) { return std::bit_cast<float>(std::bit_cast<uint32_t>(nan) | 0x00400000u); }

// x op y for + and *, with the NaN the kernels promise (reduce16.h): x's when both are NaN.
float arithmetic(float x, float y, float r) {
  if (std::isnan(x)) return quiet(x);
  if (std::isnan(y)) return quiet(y);
  return r;  // the default NaN (of inf - inf, 0 * inf) as the hardware makes it
}

// reduce.h's definition of each operation, in float32.
float apply(ReduceOp op, float x, float y) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return arithmetic(x, y, x + y);
    case ReduceOp::kProduct: return arithmetic(x, y, x * y);
    case ReduceOp::kMin: return y < x ? y : x;
    case ReduceOp::kMax: return x < y ? y : x;
    case ReduceOp::kAdasum: break;  // not element-wise (adasum_test.cc)
  }
  return 0;
}

constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct,
                                ReduceOp::kMin, ReduceOp::kMax};

// The kernels under test: what reduce() and scale() pick, and each instruction set by name.
struct Kernel {
  const char* name;
  std::function<void(DataType, ReduceOp, uint16_t*, const uint16_t*, const uint16_t*, size_t)> reduce;
  std::function<void(DataType, uint16_t*, const uint16_t*, size_t, float)> scale;
};

std::vector<Kernel> kernels() {
  std::vector<Kernel> k;
  k.push_back({"dispatched",
               [](DataType t, ReduceOp op, uint16_t* o, const uint16_t* a, const uint16_t* b, size_t n) {
                 hora::collectives::reduce(t, op, o, a, b, n);
               },
               [](DataType t, uint16_t* o, const uint16_t* in, size_t n, float f) {
                 hora::collectives::scale(t, o, in, n, f);
               }});
  k.push_back({"portable", detail::reduce16Portable, detail::scale16Portable});
#if HORA_X86_64_V3_KERNELS
  if (detail::haveX86_64V3Kernels())
    k.push_back({"x86-64-v3", detail::reduce16X86_64V3, detail::scale16X86_64V3});
#endif
  return k;
}

std::string hex(uint16_t v) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%04X", v);
  return s;
}

// Inputs: a quarter special values, a quarter values near 1 (whose sums and products round,
// often with ties), the rest any bits.
std::vector<uint16_t> mixedInputs(const Format& f, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) {
    const uint32_t r = rng();
    if (r % 4 == 0) {
      x = f.specials[rng() % f.specials.size()];
    } else if (r % 4 == 1) {
      const uint32_t exponent = f.exponent_bias - 2 + rng() % 4;
      const uint32_t mantissa = rng() & ((1u << f.mantissa_bits) - 1);
      x = static_cast<uint16_t>((rng() & 0x8000u) | exponent << f.mantissa_bits | mantissa);
    } else {
      x = static_cast<uint16_t>(rng());
    }
  }
  return v;
}

// A buffer whose data starts one element past a 32-byte boundary, so no vector load is
// aligned, followed by guard elements that no kernel may write.
constexpr size_t kGuard = 17;
constexpr uint16_t kSentinel = 0xA5A5;

struct Buffer {
  explicit Buffer(const std::vector<uint16_t>& v) : storage(v.size() + 1 + kGuard, kSentinel) {
    std::copy(v.begin(), v.end(), data());
  }
  uint16_t* data() { return storage.data() + 1; }
  void expectGuardsUntouched(size_t n) {
    for (size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(data()[i], kSentinel) << "written past the end at " << i;
  }
  std::vector<uint16_t> storage;
};

// Reduces a and b with k, into a separate buffer and in place (as the ring does), and compares
// every element with the reference.
void expectReduceMatches(const Kernel& k, const Format& f, ReduceOp op, const std::vector<uint16_t>& a,
                         const std::vector<uint16_t>& b) {
  const size_t n = a.size();
  Buffer x(a), y(b), out(std::vector<uint16_t>(n, kSentinel)), in_place(a);
  k.reduce(f.type, op, out.data(), x.data(), y.data(), n);
  k.reduce(f.type, op, in_place.data(), in_place.data(), y.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t want = f.narrow(apply(op, f.widen(a[i]), f.widen(b[i])));
    ASSERT_EQ(hex(out.data()[i]), hex(want))
        << k.name << " " << f.name << " op " << static_cast<int>(op) << " n " << n << " i " << i
        << ": " << hex(a[i]) << ", " << hex(b[i]);
    ASSERT_EQ(hex(in_place.data()[i]), hex(want)) << k.name << " in place, i " << i;
  }
  out.expectGuardsUntouched(n);
  in_place.expectGuardsUntouched(n);
}

void expectScaleMatches(const Kernel& k, const Format& f, float factor, const std::vector<uint16_t>& in) {
  const size_t n = in.size();
  Buffer source(in), out(std::vector<uint16_t>(n, kSentinel));
  k.scale(f.type, out.data(), source.data(), n, factor);
  for (size_t i = 0; i < n; ++i) {
    const float x = f.widen(in[i]);
    const uint16_t want = f.narrow(arithmetic(x, factor, x * factor));
    ASSERT_EQ(hex(out.data()[i]), hex(want))
        << k.name << " " << f.name << " factor " << factor << " n " << n << " i " << i << ": " << hex(in[i]);
  }
  out.expectGuardsUntouched(n);
}

std::vector<uint16_t> everyValue() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

TEST(Reduce16, X86_64V3KernelsRunWhereTheCpuHasThem) {
#if HORA_X86_64_V3_KERNELS
  const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
                   __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  EXPECT_EQ(detail::haveX86_64V3Kernels(), cpu) << "AVX2, F16C, FMA and BMI2: " << cpu;
  std::printf("16-bit float kernels on this CPU: %s\n", detail::haveX86_64V3Kernels() ? "x86-64-v3" : "portable");
#else
  EXPECT_FALSE(detail::haveX86_64V3Kernels());
#endif
}

// Lengths around the 16-element step and the 32-element prefetching loop: none, tails alone,
// one step, pairs of steps, and every mix of the three.
TEST(Reduce16, EveryOpAndLengthMatchesTheReference) {
  for (const Kernel& k : kernels())
    for (const Format* f : kFormats)
      for (ReduceOp op : kAllOps)
        for (size_t n : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 49, 1000, 4099}) {
          expectReduceMatches(k, *f, op, mixedInputs(*f, n, 1), mixedInputs(*f, n, 2));
          if (::testing::Test::HasFatalFailure()) return;
        }
}

TEST(Reduce16, EveryPairOfSpecialValuesMatchesTheReference) {
  for (const Kernel& k : kernels())
    for (const Format* f : kFormats) {
      std::vector<uint16_t> a, b;
      for (uint16_t x : f->specials)
        for (uint16_t y : f->specials) {
          a.push_back(x);
          b.push_back(y);
        }
      for (ReduceOp op : kAllOps) {
        expectReduceMatches(k, *f, op, a, b);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

// Every 16-bit pattern against itself, its negation and a shuffled partner.
TEST(Reduce16, EveryValueMatchesTheReference) {
  const std::vector<uint16_t> a = everyValue();
  std::vector<uint16_t> negated(a.size()), shuffled(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    negated[i] = a[i] ^ 0x8000;
    shuffled[i] = static_cast<uint16_t>(i * 40503 + 12345);  // odd multiplier: a permutation
  }
  for (const Kernel& k : kernels())
    for (const Format* f : kFormats)
      for (ReduceOp op : kAllOps)
        for (const std::vector<uint16_t>* b : {&a, &std::as_const(negated), &std::as_const(shuffled)}) {
          expectReduceMatches(k, *f, op, a, *b);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

// Scaling (Average's division, prescale and postscale) by factors that round, overflow,
// underflow into subnormals, and are infinite or NaN.
TEST(Reduce16, ScaleMatchesTheReference) {
  const float factors[] = {1.0f, 0.5f, 1.0f / 3, 0.125f, 3.0f, 1e-3f, 65536.0f, 1e30f, 1e-30f, -2.0f,
                           0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (const Kernel& k : kernels())
    for (const Format* f : kFormats)
      for (float factor : factors) {
        expectScaleMatches(k, *f, factor, everyValue());
        for (size_t n : {1, 7, 15, 17, 33, 48, 49, 4099}) expectScaleMatches(k, *f, factor, mixedInputs(*f, n, 3));
        if (::testing::Test::HasFatalFailure()) return;
      }
}

// The last step of an fp16-compressed Average: the sum divided by the ranks, in float32.
TEST(Reduce16, FinalizeAveragesFloat16AndBFloat16InFloat32) {
  for (const Format* f : kFormats) {
    const std::vector<uint16_t> sum = mixedInputs(*f, 1003, 4);
    std::vector<uint16_t> out(sum.size());
    finalize(f->type, ReduceOp::kAverage, out.data(), sum.data(), sum.size(), 3, 1.0);
    for (size_t i = 0; i < sum.size(); ++i)
      ASSERT_EQ(hex(out[i]), hex(f->narrow(arithmetic(f->widen(sum[i]), 1.0f / 3, f->widen(sum[i]) * (1.0f / 3)))))
          << f->name << " i " << i << ": " << hex(sum[i]);
  }
}

// The dispatched kernels and each instruction set's agree with each other directly, too, on a
// long run that is not a multiple of the step.
TEST(Reduce16, KernelsAgreeWithThePortableOnes) {
  const std::vector<Kernel> ks = kernels();
  for (const Format* f : kFormats)
    for (ReduceOp op : kAllOps) {
      const std::vector<uint16_t> a = mixedInputs(*f, 100003, 5), b = mixedInputs(*f, 100003, 6);
      std::vector<uint16_t> want(a.size()), got(a.size());
      detail::reduce16Portable(f->type, op, want.data(), a.data(), b.data(), a.size());
      for (const Kernel& k : ks) {
        k.reduce(f->type, op, got.data(), a.data(), b.data(), a.size());
        ASSERT_TRUE(got == want) << k.name << " " << f->name << " op " << static_cast<int>(op);
      }
    }
}

}  // namespace
}  // namespace hora::collectives
