// The float16 and bfloat16 kernels for x86-64-v3 CPUs (AVX2, F16C).
//
// half.h's branch-free conversions vectorize, but they spend dozens of vector operations on
// each group of elements, which kept a float16 Sum near 5 GB/s where float32's runs at memory
// speed. Here F16C converts 8 elements per instruction, and bfloat16 takes a few AVX2 integer
// operations per 8 elements. In cache these loops are bound by the number of vector
// instructions per element, and from memory that bound still shows (a 64 MiB bfloat16 Sum lost
// a fifth of its speed to four more instructions per 16 elements), so every one saved counts.
//
// The results are the portable kernels' bits (reduce16.h): F16C's narrowing rounds to nearest
// even like Half::fromFloat; the bfloat16 rounding below is BFloat16::fromFloat's, lane by lane;
// Min and Max pick the same operand as the portable comparisons; NaNs end as the portable
// conversions leave them.
#include "collectives/reduce16.h"

#if HORA_X86_64_V3_KERNELS

#include <immintrin.h>

#include <cstring>

// Everything below may use AVX2, F16C and FMA, and runs only after haveX86_64V3Kernels().
// No std template is instantiated in this region: a copy compiled for AVX2 could be the one
// the linker keeps for callers on any CPU.
#pragma GCC push_options
#pragma GCC target("arch=x86-64-v3")

namespace hora::collectives::detail {
namespace {

// One step handles 16 elements (32 bytes), widened into two vectors of 8 float32.
constexpr size_t kStep = 16;

// How far ahead of the reduction the inputs are prefetched. The hardware prefetchers alone kept
// a 64 MiB bfloat16 Sum about a quarter below the speed it reaches with this (float16 gains
// less); 2 KiB ahead is too close, 8 KiB no better. Prefetching past the end of a buffer is
// harmless: a prefetch never faults.
constexpr size_t kPrefetchBytes = 4096;

void prefetch(const uint16_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

struct Wide {
  __m256 lo, hi;
};

// What the float32 results of an operation can hold when they are NaN.
enum class NaNs {
  kAny,
  // Only a widened input made quiet, or the default NaN: what addition and multiplication of
  // widened 16-bit floats produce, and scaling by a factor that is not NaN (x86 arithmetic
  // returns its first NaN operand, quieted, or the default NaN 0xFFC00000). Min and Max are not
  // of this kind: they return an operand as it is, so a signaling NaN stays signaling.
  kQuietInputs,
};

__m256i load256(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
void store256(uint16_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// float16: F16C widens exactly (subnormals included) and narrows with the rounding given in
// the instruction, so the MXCSR rounding mode does not matter.
struct HalfLanes {
  static Wide load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }

  // Every kind of NaN needs quietNaN(): even a widened input keeps its payload through F16C.
  template <NaNs>
  static void store(uint16_t* p, Wide w) {
    const __m128i lo = _mm256_cvtps_ph(w.lo, _MM_FROUND_TO_NEAREST_INT);
    const __m128i hi = _mm256_cvtps_ph(w.hi, _MM_FROUND_TO_NEAREST_INT);
    store256(p, quietNaN(_mm256_set_m128i(hi, lo)));
  }

  // F16C keeps the top 9 bits of a NaN's payload and sets the quiet bit, so a NaN's magnitude
  // is at least 0x7E00; Half::fromFloat returns sign | 0x7E00 for every NaN. Two minimums make
  // one of the other: as signed numbers, the positive NaNs are the only values above 0x7E00
  // (negative ones are below zero); as unsigned numbers, the negative NaNs (0xFE00 and up) are
  // then the only values above 0xFE00. Every other value is left as it is.
  static __m256i quietNaN(__m256i h) {
    const __m256i positive_done = _mm256_min_epi16(h, _mm256_set1_epi16(0x7E00));
    return _mm256_min_epu16(positive_done, _mm256_set1_epi16(static_cast<short>(0xFE00)));
  }
};

// bfloat16: the top half of a float32. Seen as 8 32-bit lanes, 16 elements are pairs: an even
// element in the low half of each lane, the next odd one in the high half. Shifting left by 16
// makes the even elements float32s and clearing the low halves makes the odd ones; narrowing
// shifts the even results back down and blends the halves together. (Unpacking and packing
// instead takes as many instructions.)
struct BFloat16Lanes {
  static Wide load(const uint16_t* p) {
    const __m256i v = load256(p);
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))))};
  }

  template <NaNs kNaNs>
  static void store(uint16_t* p, Wide w) {
    const __m256i even = _mm256_srli_epi32(narrow<kNaNs>(w.lo), 16);
    store256(p, _mm256_blend_epi16(even, narrow<kNaNs>(w.hi), 0xAA));
  }

  // BFloat16::fromFloat on 8 lanes, the result in the high half of each (the low half is left
  // over): add 0x7FFF, plus 1 when the kept part is odd (ties go to even), and let the carry
  // reach the high half. Shifting the kept part's lowest bit into the sign bit lets a blend
  // pick 0x7FFF or 0x8000: two instructions, where masking and shifting it down takes three.
  template <NaNs kNaNs>
  static __m256i narrow(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256 odd_in_sign = _mm256_castsi256_ps(_mm256_slli_epi32(u, 15));
    const __m256 bias = _mm256_blendv_ps(_mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF)),
                                         _mm256_castsi256_ps(_mm256_set1_epi32(0x8000)), odd_in_sign);
    const __m256i rounded = _mm256_add_epi32(u, _mm256_castps_si256(bias));
    // A quiet NaN with a zero low half rounds to itself, as fromFloat leaves it.
    if constexpr (kNaNs == NaNs::kQuietInputs) return rounded;
    // Any other NaN keeps its high half, made quiet.
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(rounded, quiet, nan);
  }
};

// x + y and x * y that return x's NaN when both are NaN, as the portable kernels do (x86
// returns its first NaN operand). Written in assembly because the compiler takes the
// intrinsics to be commutative and may swap their operands.
__m256 addInOrder(__m256 x, __m256 y) {
  __m256 r;
  asm("vaddps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
  return r;
}
__m256 multiplyInOrder(__m256 x, __m256 y) {
  __m256 r;
  asm("vmulps %2, %1, %0" : "=x"(r) : "x"(x), "x"(y));
  return r;
}

// The operations, as the portable kernels define them (reduce.cc).
struct Add {
  static constexpr NaNs kNaNs = NaNs::kQuietInputs;
  __m256 operator()(__m256 x, __m256 y) const { return addInOrder(x, y); }
};
struct Multiply {
  static constexpr NaNs kNaNs = NaNs::kQuietInputs;
  __m256 operator()(__m256 x, __m256 y) const { return multiplyInOrder(x, y); }
};
// `y < x ? y : x`: MINPS(a, b) is `a < b ? a : b`, which returns b for a NaN or two zeros.
struct Minimum {
  static constexpr NaNs kNaNs = NaNs::kAny;
  __m256 operator()(__m256 x, __m256 y) const { return _mm256_min_ps(y, x); }
};
// `x < y ? y : x`, i.e. `y > x ? y : x`: MAXPS(y, x).
struct Maximum {
  static constexpr NaNs kNaNs = NaNs::kAny;
  __m256 operator()(__m256 x, __m256 y) const { return _mm256_max_ps(y, x); }
};

template <typename Lanes, typename Op>
void binaryStep(uint16_t* out, const uint16_t* a, const uint16_t* b, Op op) {
  const Wide x = Lanes::load(a);
  const Wide y = Lanes::load(b);
  Lanes::template store<Op::kNaNs>(out, {op(x.lo, y.lo), op(x.hi, y.hi)});
}

template <typename Lanes, typename Op>
void binaryLoop(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n, Op op) {
  size_t i = 0;
  // Two steps per prefetch: one 64-byte line of each input.
  for (; i + 2 * kStep <= n; i += 2 * kStep) {
    prefetch(a + i);
    prefetch(b + i);
    binaryStep<Lanes>(out + i, a + i, b + i, op);
    binaryStep<Lanes>(out + i + kStep, a + i + kStep, b + i + kStep, op);
  }
  for (; i + kStep <= n; i += kStep) binaryStep<Lanes>(out + i, a + i, b + i, op);
  if (i == n) return;
  // The last n % 16 elements go through the same instructions by way of zero-padded copies:
  // nothing is read or written past the buffers, and no element takes a different path.
  uint16_t ta[kStep] = {}, tb[kStep] = {}, to[kStep];
  const size_t bytes = (n - i) * sizeof(uint16_t);
  std::memcpy(ta, a + i, bytes);
  std::memcpy(tb, b + i, bytes);
  binaryStep<Lanes>(to, ta, tb, op);
  std::memcpy(out + i, to, bytes);
}

template <typename Lanes, NaNs kNaNs>
void scaleStep(uint16_t* out, const uint16_t* in, __m256 factor) {
  const Wide x = Lanes::load(in);
  Lanes::template store<kNaNs>(out, {multiplyInOrder(x.lo, factor), multiplyInOrder(x.hi, factor)});
}

template <typename Lanes, NaNs kNaNs>
void scaleLoop(uint16_t* out, const uint16_t* in, size_t n, __m256 factor) {
  size_t i = 0;
  for (; i + 2 * kStep <= n; i += 2 * kStep) {  // as in binaryLoop
    prefetch(in + i);
    scaleStep<Lanes, kNaNs>(out + i, in + i, factor);
    scaleStep<Lanes, kNaNs>(out + i + kStep, in + i + kStep, factor);
  }
  for (; i + kStep <= n; i += kStep) scaleStep<Lanes, kNaNs>(out + i, in + i, factor);
  if (i == n) return;
  uint16_t t[kStep] = {}, to[kStep];
  const size_t bytes = (n - i) * sizeof(uint16_t);
  std::memcpy(t, in + i, bytes);
  scaleStep<Lanes, kNaNs>(to, t, factor);
  std::memcpy(out + i, to, bytes);
}

// x * factor is NaN only for a NaN x (made quiet), 0 * inf (the default NaN), or a NaN factor,
// whose payload can be anything: only that last case needs the NaN handling.
template <typename Lanes>
void scaleLanes(uint16_t* out, const uint16_t* in, size_t n, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  if (factor != factor) scaleLoop<Lanes, NaNs::kAny>(out, in, n, f);
  else scaleLoop<Lanes, NaNs::kQuietInputs>(out, in, n, f);
}

template <typename Lanes>
void reduceLanes(ReduceOp op, uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: binaryLoop<Lanes>(out, a, b, n, Add{}); return;
    case ReduceOp::kProduct: binaryLoop<Lanes>(out, a, b, n, Multiply{}); return;
    case ReduceOp::kMin: binaryLoop<Lanes>(out, a, b, n, Minimum{}); return;
    case ReduceOp::kMax: binaryLoop<Lanes>(out, a, b, n, Maximum{}); return;
    case ReduceOp::kAdasum: return;  // not element-wise: reduce() refuses it
  }
}

}  // namespace

void reduce16X86_64V3(DataType type, ReduceOp op, uint16_t* out, const uint16_t* a,
                      const uint16_t* b, size_t n) {
  if (type == DataType::kFloat16) reduceLanes<HalfLanes>(op, out, a, b, n);
  else reduceLanes<BFloat16Lanes>(op, out, a, b, n);
}

void scale16X86_64V3(DataType type, uint16_t* out, const uint16_t* in, size_t n, float factor) {
  if (type == DataType::kFloat16) scaleLanes<HalfLanes>(out, in, n, factor);
  else scaleLanes<BFloat16Lanes>(out, in, n, factor);
}

}  // namespace hora::collectives::detail

#pragma GCC pop_options

#endif  // HORA_X86_64_V3_KERNELS
