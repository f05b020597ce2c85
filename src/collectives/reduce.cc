#include "collectives/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/half.h"
#include "hora/errors.h"

namespace hora::collectives {
namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define HORA_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HORA_KERNEL
#endif

// Every helper below is inlined into the two kernel entry points, so that each target clone
// compiles the loops for its own instruction set.
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
  }
}

// 16-bit floats: widen, combine in float32, narrow. `Codec` is Half or BFloat16 (half.h).
template <typename Codec>
HORA_INLINE void reduce16(ReduceOp op, uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  auto run = [&](auto f) {
    for (size_t i = 0; i < n; ++i)
      out[i] = Codec::fromFloat(f(Codec::toFloat(a[i]), Codec::toFloat(b[i])));
  };
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: run([](float x, float y) { return x + y; }); return;
    case ReduceOp::kProduct: run([](float x, float y) { return x * y; }); return;
    case ReduceOp::kMin: run([](float x, float y) { return y < x ? y : x; }); return;
    case ReduceOp::kMax: run([](float x, float y) { return x < y ? y : x; }); return;
  }
}

HORA_KERNEL void reduceKernel(DataType type, ReduceOp op, void* out, const void* a, const void* b,
                              size_t n) {
  switch (type) {
    case DataType::kUInt8: reduceTyped(op, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n); return;
    case DataType::kInt8: reduceTyped(op, static_cast<int8_t*>(out), static_cast<const int8_t*>(a), static_cast<const int8_t*>(b), n); return;
    case DataType::kInt32: reduceTyped(op, static_cast<int32_t*>(out), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), n); return;
    case DataType::kInt64: reduceTyped(op, static_cast<int64_t*>(out), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), n); return;
    case DataType::kFloat32: reduceTyped(op, static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), n); return;
    case DataType::kFloat64: reduceTyped(op, static_cast<double*>(out), static_cast<const double*>(a), static_cast<const double*>(b), n); return;
    case DataType::kFloat16: reduce16<Half>(op, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n); return;
    case DataType::kBFloat16: reduce16<BFloat16>(op, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n); return;
  }
}

template <typename T>
HORA_INLINE void scaleTyped(T* out, const T* in, size_t n, double f) {
  if constexpr (std::is_integral_v<T>) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(std::llround(static_cast<double>(in[i]) * f));
  } else {
    const T tf = static_cast<T>(f);
    for (size_t i = 0; i < n; ++i) out[i] = in[i] * tf;
  }
}

template <typename Codec>
HORA_INLINE void scale16(uint16_t* out, const uint16_t* in, size_t n, double f) {
  const float ff = static_cast<float>(f);
  for (size_t i = 0; i < n; ++i) out[i] = Codec::fromFloat(Codec::toFloat(in[i]) * ff);
}

HORA_KERNEL void scaleKernel(DataType type, void* out, const void* in, size_t n, double f) {
  switch (type) {
    case DataType::kUInt8: scaleTyped(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), n, f); return;
    case DataType::kInt8: scaleTyped(static_cast<int8_t*>(out), static_cast<const int8_t*>(in), n, f); return;
    case DataType::kInt32: scaleTyped(static_cast<int32_t*>(out), static_cast<const int32_t*>(in), n, f); return;
    case DataType::kInt64: scaleTyped(static_cast<int64_t*>(out), static_cast<const int64_t*>(in), n, f); return;
    case DataType::kFloat32: scaleTyped(static_cast<float*>(out), static_cast<const float*>(in), n, f); return;
    case DataType::kFloat64: scaleTyped(static_cast<double*>(out), static_cast<const double*>(in), n, f); return;
    case DataType::kFloat16: scale16<Half>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), n, f); return;
    case DataType::kBFloat16: scale16<BFloat16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), n, f); return;
  }
}

template <typename T>
HORA_INLINE void divideTyped(T* out, const T* in, size_t n, int d) {
  const T td = static_cast<T>(d);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(in[i] / td);
}

}  // namespace

void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  reduceKernel(type, op, out, a, b, count);
}

void scale(DataType type, void* out, const void* in, size_t count, double factor) {
  if (count == 0) return;
  scaleKernel(type, out, in, count, factor);
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
  double factor = postscale;
  if (op == ReduceOp::kAverage && nranks != 1) {
    if (isFloatingPoint(type)) {
      factor /= nranks;
    } else {
      switch (type) {
        case DataType::kUInt8: divideTyped(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), count, nranks); break;
        case DataType::kInt8: divideTyped(static_cast<int8_t*>(out), static_cast<const int8_t*>(in), count, nranks); break;
        case DataType::kInt32: divideTyped(static_cast<int32_t*>(out), static_cast<const int32_t*>(in), count, nranks); break;
        case DataType::kInt64: divideTyped(static_cast<int64_t*>(out), static_cast<const int64_t*>(in), count, nranks); break;
        default: throw InternalError("unreachable: integer average of a floating type");
      }
      if (postscale == 1.0) return;
      in = out;
    }
  }
  scaleKernel(type, out, in, count, factor);
}

}  // namespace hora::collectives
