// Conversions between 16-bit floats and float32, written as branch-free bit arithmetic so that
// loops over them vectorize.
//
// Half: IEEE binary16 through the compiler's _Float16 (F16C instructions where the kernel clone
// has them). BFloat16: the top 16 bits of a float32; narrowing rounds to nearest even and keeps
// NaNs quiet.
#pragma once

#include <bit>
#include <cstdint>

namespace hora::collectives {

struct Half {
  static inline float toFloat(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }
  static inline uint16_t fromFloat(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
};

struct BFloat16 {
  static inline float toFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }
  static inline uint16_t fromFloat(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
  }
};

}  // namespace hora::collectives
