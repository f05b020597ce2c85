// Independent reference for collective tests: inputs whose reductions are exact small integers,
// element encode/decode written here (not taken from the library), and a reduction in double.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hora/types.h"

namespace hora::testing {

// Input of `rank` at element i: small integers, so sums over 8 ranks and products over a few
// stay exact in every type (float16 holds integers up to 2048 exactly).
inline double inputValue(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) {
    static constexpr double kFactors[] = {1, -1, 2, 1, 1, -1, 1, 2, 1, 1, 1};
    return kFactors[(static_cast<size_t>(rank) * 3 + i) % 11];
  }
  return static_cast<double>((static_cast<size_t>(rank) * 7 + i * 13) % 11) - 3;  // in [-3, 7]
}

inline bool isUnsigned(DataType t) { return t == DataType::kUInt8; }

// Unsigned inputs use the absolute value; bool inputs are whether the value is non-zero.
inline double inputFor(DataType t, int rank, size_t i, ReduceOp op) {
  const double v = inputValue(rank, i, op);
  if (t == DataType::kBool) return v != 0 ? 1 : 0;
  return isUnsigned(t) ? std::fabs(v) : v;
}

// bool has no Average (and no scale factors): the core refuses it.
inline bool reducible(DataType t, ReduceOp op) { return t != DataType::kBool || op != ReduceOp::kAverage; }

inline void encode(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int64_t>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<_Float16*>(p)[i] = static_cast<_Float16>(v); break;
    case DataType::kBFloat16: {
      // Truncation is exact for the small integers the tests use.
      const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(v));
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits >> 16);
      break;
    }
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kInt16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

inline double decode(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::kFloat16: return static_cast<double>(static_cast<const _Float16*>(p)[i]);
    case DataType::kBFloat16: {
      const uint32_t bits = uint32_t{static_cast<const uint16_t*>(p)[i]} << 16;
      return std::bit_cast<float>(bits);
    }
    case DataType::kFloat32: return static_cast<const float*>(p)[i];
    case DataType::kFloat64: return static_cast<const double*>(p)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(p)[i];  // 0 or 1: any other byte is wrong
  }
  return 0;
}

inline size_t elemSize(DataType t) {
  static constexpr size_t kSizes[] = {1, 1, 4, 8, 2, 2, 4, 8, 2, 1};
  return kSizes[static_cast<int>(t)];
}

inline bool isFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

// x * factor as hora/options.h defines scaling: integers are truncated toward zero.
inline double scaled(DataType t, double x, double factor) {
  return isFloat(t) ? x * factor : std::trunc(x * factor);
}

// The expected result of reducing the ranks' inputs at element i (before rounding to the type).
// Average is Sum times postscale / size; bool's Sum and Max are or, Product and Min and, which
// on inputs of 0 and 1 are max and min.
inline double expectedReduction(DataType t, ReduceOp op, int size, size_t i, double prescale,
                                double postscale) {
  const ReduceOp input_op = op;
  if (t == DataType::kBool && op == ReduceOp::kSum) op = ReduceOp::kMax;
  if (t == DataType::kBool && op == ReduceOp::kProduct) op = ReduceOp::kMin;
  double acc = 0;
  for (int r = 0; r < size; ++r) {
    const double x = scaled(t, inputFor(t, r, i, input_op), prescale);
    if (r == 0) { acc = x; continue; }
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAverage: acc += x; break;
      case ReduceOp::kProduct: acc *= x; break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
      case ReduceOp::kAdasum: ADD_FAILURE() << "Adasum's reference is adasum_test.cc's"; break;
    }
  }
  const double factor = op == ReduceOp::kAverage ? postscale / size : postscale;
  return factor == 1.0 ? acc : scaled(t, acc, factor);
}

// Tolerance: exact for integers; a couple of units in the last place for floats (Average and
// scaling round once more than the reference).
inline double tolerance(DataType t, double expected) {
  const double mag = std::max(1.0, std::fabs(expected));
  switch (t) {
    case DataType::kFloat16: return mag * 2e-3;
    case DataType::kBFloat16: return mag * 1.6e-2;
    case DataType::kFloat32: return mag * 3e-7;
    case DataType::kFloat64: return mag * 1e-15;
    default: return 0;
  }
}

inline std::vector<std::byte> makeBuffer(DataType t, size_t count) {
  return std::vector<std::byte>(count * elemSize(t) + 1);  // +1: never a null data() for count 0
}

}  // namespace hora::testing
