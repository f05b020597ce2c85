#include "collectives/reduce.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/half.h"
#include "collectives/reduce16.h"
#include "hora/errors.h"

namespace hora::collectives {
using common::BFloat16;
using common::Half;
using common::selectBits;
namespace {

#if HORA_X86_64_V3_KERNELS
#define HORA_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HORA_KERNEL
#endif

// Every helper below is inlined into its caller: the two kernel entry points, so that each
// target clone compiles the loops for its own instruction set, or the portable 16-bit kernels.
#define HORA_INLINE [[gnu::always_inline]] inline

// Wrapping arithmetic for integers: compute in the unsigned type of the same width.
template <typename T>
HORA_INLINE T wrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
HORA_INLINE T wrapMul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  // uint8 * uint8 promotes to int; promote explicitly to unsigned to avoid signed overflow.
  return static_cast<T>(static_cast<unsigned long long>(static_cast<U>(a)) *
                        static_cast<unsigned long long>(static_cast<U>(b)));
}

template <typename T, typename F>
HORA_INLINE void binaryLoop(T* out, const T* a, const T* b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <typename T>
HORA_INLINE void reduceTyped(ReduceOp op, T* out, const T* a, const T* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      if constexpr (std::is_integral_v<T>) binaryLoop(out, a, b, n, wrapAdd<T>);
      else binaryLoop(out, a, b, n, [](T x, T y) { return x + y; });
      return;
    case ReduceOp::kProduct:
      if constexpr (std::is_integral_v<T>) binaryLoop(out, a, b, n, wrapMul<T>);
      else binaryLoop(out, a, b, n, [](T x, T y) { return x * y; });
      return;
    case ReduceOp::kMin: binaryLoop(out, a, b, n, [](T x, T y) { return y < x ? y : x; }); return;
    case ReduceOp::kMax: binaryLoop(out, a, b, n, [](T x, T y) { return x < y ? y : x; }); return;
    case ReduceOp::kAdasum: return;  // not element-wise: reduce() refuses it
  }
}

// bool as bytes: any non-zero byte is true, results are 0 or 1. Sum (and Average, which
// whyNotReducible refuses) and Max are `or`; Product and Min are `and`.
HORA_INLINE void reduceBool(ReduceOp op, uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n) {
  if (op == ReduceOp::kProduct || op == ReduceOp::kMin)
    binaryLoop(out, a, b, n, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>(x != 0 && y != 0); });
  else
    binaryLoop(out, a, b, n, [](uint8_t x, uint8_t y) { return static_cast<uint8_t>((x | y) != 0); });
}

// `r`, the result of x + y or x * y, except that where x is NaN it is x's NaN (made quiet). When
// both operands are NaN, x86 returns the first, but the compiler may swap the operands of + and
// *; this fixes which NaN's sign (and, in bfloat16, payload) the result carries, as the
// x86-64-v3 kernels do. A bit select rather than a ternary, which GCC left as a branch that
// kept the whole loop scalar (a quarter of the speed).
HORA_INLINE float firstNaN(float x, float r) {
  return std::bit_cast<float>(
      selectBits(x != x, std::bit_cast<uint32_t>(x + x), std::bit_cast<uint32_t>(r)));
}

// 16-bit floats: widen, combine in float32, narrow. `Codec` is Half or BFloat16 (half.h). The
// portable kernels of reduce16.h; CPUs with x86-64-v3 run reduce16_x86_64_v3.cc's instead.
template <typename Codec>
HORA_INLINE void reduce16(ReduceOp op, uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  auto run = [&](auto f) {
    for (size_t i = 0; i < n; ++i)
      out[i] = Codec::fromFloat(f(Codec::toFloat(a[i]), Codec::toFloat(b[i])));
  };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: run([](float x, float y) { return firstNaN(x, x + y); }); return;
    case ReduceOp::kProduct: run([](float x, float y) { return firstNaN(x, x * y); }); return;
    case ReduceOp::kMin: run([](float x, float y) { return y < x ? y : x; }); return;
    case ReduceOp::kMax: run([](float x, float y) { return x < y ? y : x; }); return;
    case ReduceOp::kAdasum: return;  // not element-wise: reduce() refuses it
  }
}

// Every type but the 16-bit floats, which reduce() sends to reduce16.h's kernels.
HORA_KERNEL void reduceKernel(DataType type, ReduceOp op, void* out, const void* a, const void* b,
                              size_t n) {
  switch (type) {
    case DataType::kUInt8: reduceTyped(op, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n); return;
    case DataType::kInt8: reduceTyped(op, static_cast<int8_t*>(out), static_cast<const int8_t*>(a), static_cast<const int8_t*>(b), n); return;
    case DataType::kInt32: reduceTyped(op, static_cast<int32_t*>(out), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), n); return;
    case DataType::kInt64: reduceTyped(op, static_cast<int64_t*>(out), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), n); return;
    case DataType::kInt16: reduceTyped(op, static_cast<int16_t*>(out), static_cast<const int16_t*>(a), static_cast<const int16_t*>(b), n); return;
    case DataType::kBool: reduceBool(op, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n); return;
    case DataType::kFloat32: reduceTyped(op, static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), n); return;
    case DataType::kFloat64: reduceTyped(op, static_cast<double*>(out), static_cast<const double*>(a), static_cast<const double*>(b), n); return;
    case DataType::kFloat16:
    case DataType::kBFloat16: break;
  }
  throw InternalError("unreachable: 16-bit float in reduceKernel");
}

// v converted to T toward zero, as C++ converts a double to an integer (and as Horovod scales
// integers on the CPU). Where that conversion is undefined, the result is defined here: beyond
// int64's range v saturates to it, NaN gives 0, and a value outside T wraps into T's width.
template <typename T>
HORA_INLINE T truncateToInteger(double v) {
  constexpr double kTwoTo63 = 9223372036854775808.0;
  int64_t i = 0;
  if (v >= kTwoTo63) i = std::numeric_limits<int64_t>::max();
  else if (v < -kTwoTo63) i = std::numeric_limits<int64_t>::min();
  else if (v == v) i = static_cast<int64_t>(v);
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(i));
}

// Horovod's arithmetic: integers are multiplied in double and truncated; floats are multiplied
// in their own type by the factor rounded to it.
template <typename T>
HORA_INLINE void scaleTyped(T* out, const T* in, size_t n, double f) {
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < n; ++i) out[i] = truncateToInteger<T>(static_cast<double>(in[i]) * f);
  } else {
    const T tf = static_cast<T>(f);
    for (size_t i = 0; i < n; ++i) out[i] = in[i] * tf;
  }
}

template <typename Codec>
HORA_INLINE void scale16(uint16_t* out, const uint16_t* in, size_t n, float f) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Codec::toFloat(in[i]);
    out[i] = Codec::fromFloat(firstNaN(x, x * f));
  }
}

// Every type but the 16-bit floats, as reduceKernel.
// out[i] = in[i] / d: a mean of floats is the correctly rounded quotient. Multiplying by 1/n
// rounded to float (Horovod's arithmetic) is one unit in the last place off for about a third of
// the values at n = 3, 5, 6 or 7; Horovod's own join test expects the quotient.
template <typename T>
HORA_INLINE void divideTyped(T* out, const T* in, size_t n, T d) {
  for (size_t i = 0; i < n; ++i) out[i] = in[i] / d;
}

HORA_KERNEL void divideKernel(DataType type, void* out, const void* in, size_t n, int d) {
  if (type == DataType::kFloat32) divideTyped(static_cast<float*>(out), static_cast<const float*>(in), n, float(d));
  else divideTyped(static_cast<double*>(out), static_cast<const double*>(in), n, double(d));
}

HORA_KERNEL void scaleKernel(DataType type, void* out, const void* in, size_t n, double f) {
  switch (type) {
    case DataType::kUInt8: scaleTyped(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), n, f); return;
    case DataType::kInt8: scaleTyped(static_cast<int8_t*>(out), static_cast<const int8_t*>(in), n, f); return;
    case DataType::kInt32: scaleTyped(static_cast<int32_t*>(out), static_cast<const int32_t*>(in), n, f); return;
    case DataType::kInt64: scaleTyped(static_cast<int64_t*>(out), static_cast<const int64_t*>(in), n, f); return;
    case DataType::kInt16: scaleTyped(static_cast<int16_t*>(out), static_cast<const int16_t*>(in), n, f); return;
    case DataType::kBool: throw InvalidArgumentError("bool elements cannot be scaled");
    case DataType::kFloat32: scaleTyped(static_cast<float*>(out), static_cast<const float*>(in), n, f); return;
    case DataType::kFloat64: scaleTyped(static_cast<double*>(out), static_cast<const double*>(in), n, f); return;
    case DataType::kFloat16:
    case DataType::kBFloat16: break;
  }
  throw InternalError("unreachable: 16-bit float in scaleKernel");
}

bool is16BitFloat(DataType type) { return type == DataType::kFloat16 || type == DataType::kBFloat16; }

}  // namespace

namespace detail {

void reduce16Portable(DataType type, ReduceOp op, uint16_t* out, const uint16_t* a,
                      const uint16_t* b, size_t n) {
  if (type == DataType::kFloat16) reduce16<Half>(op, out, a, b, n);
  else reduce16<BFloat16>(op, out, a, b, n);
}

void scale16Portable(DataType type, uint16_t* out, const uint16_t* in, size_t n, float factor) {
  if (type == DataType::kFloat16) scale16<Half>(out, in, n, factor);
  else scale16<BFloat16>(out, in, n, factor);
}

bool haveX86_64V3Kernels() {
#if HORA_X86_64_V3_KERNELS
  // Asked once. __builtin_cpu_init first, as this may run before libgcc's own constructor has
  // filled in the CPU model (from another static initializer).
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("x86-64-v3") != 0;
  }();
  return have;
#else
  return false;
#endif
}

}  // namespace detail

namespace {

// The 16-bit float kernels this CPU runs, chosen on first use.
struct Kernels16 {
  decltype(&detail::reduce16Portable) reduce;
  decltype(&detail::scale16Portable) scale;
};

const Kernels16& kernels16() {
  static const Kernels16 kernels = [] {
#if HORA_X86_64_V3_KERNELS
    if (detail::haveX86_64V3Kernels()) return Kernels16{detail::reduce16X86_64V3, detail::scale16X86_64V3};
#endif
    return Kernels16{detail::reduce16Portable, detail::scale16Portable};
  }();
  return kernels;
}

}  // namespace

void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  // Adasum's coefficients depend on whole tensors: only adasum.h combines its partial results.
  if (op == ReduceOp::kAdasum) throw InternalError("reduce: Adasum is not an element-wise reduction");
  if (count == 0) return;
  if (!is16BitFloat(type)) {
    reduceKernel(type, op, out, a, b, count);
    return;
  }
  kernels16().reduce(type, op, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                     static_cast<const uint16_t*>(b), count);
}

void scale(DataType type, void* out, const void* in, size_t count, double factor) {
  if (count == 0) return;
  if (!is16BitFloat(type)) {
    scaleKernel(type, out, in, count, factor);
    return;
  }
  // 16-bit floats are scaled in float32, by the factor rounded to float32.
  kernels16().scale(type, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), count,
                    static_cast<float>(factor));
}

bool needsFinalize(ReduceOp op, double postscale, int nranks) {
  return postscale != 1.0 || (op == ReduceOp::kAverage && nranks != 1);
}

void finalize(DataType type, ReduceOp op, void* out, const void* in, size_t count, int nranks,
              double postscale) {
  if (!needsFinalize(op, postscale, nranks) || count == 0) {
    if (out != in && count > 0) std::memmove(out, in, count * dataTypeSize(type));
    return;
  }
  if (op == ReduceOp::kAverage && postscale == 1.0 &&
      (type == DataType::kFloat32 || type == DataType::kFloat64)) {
    divideKernel(type, out, in, count, nranks);
    return;
  }
  // Otherwise Average is a postscale, for integers too (one truncation of sum * postscale / n),
  // as in Horovod; the factor is divided in double before the elements are multiplied by it.
  const double factor = op == ReduceOp::kAverage ? postscale / nranks : postscale;
  scale(type, out, in, count, factor);
}

std::string whyNotReducible(DataType type, const AllreduceOptions& o) {
  const int t = static_cast<int>(type), op = static_cast<int>(o.op);
  if (t < 0 || t >= kNumDataTypes) return "unknown data type " + std::to_string(t);
  if (op < 0 || op >= kNumReduceOps) return "unknown reduce op " + std::to_string(op);
  if (!std::isfinite(o.prescale)) return "prescale factor is not finite";
  if (!std::isfinite(o.postscale)) return "postscale factor is not finite";
  if (o.op == ReduceOp::kAdasum && !isFloatingPoint(type))
    return "Adasum reduces floating-point tensors only (float16, bfloat16, float32, float64); got " +
           std::string(toString(type));
  if (type == DataType::kBool && o.op == ReduceOp::kAverage)
    return "bool tensors cannot be averaged (Sum is logical or, Product logical and)";
  if (type == DataType::kBool && (o.prescale != 1.0 || o.postscale != 1.0))
    return "bool tensors cannot be scaled (prescale and postscale factors must be 1)";
  return {};
}

}  // namespace hora::collectives
