// Conversions between 16-bit floats and float32, written as branch-free bit arithmetic (the
// conditionals become vector selects), so that loops over them vectorize with plain SSE2/AVX2
// integer and float instructions. Both round to nearest even and keep NaNs quiet.
//
// Half (IEEE binary16): widening re-biases the exponent; subnormal halves are renormalized by
// letting the FPU subtract a magic number. Narrowing adds the bits that round to nearest even
// before truncating; results below the smallest normal half are rounded by adding a magic
// number whose exponent places the half's last mantissa bit at float32's last bit.
// BFloat16: the top 16 bits of a float32.
#pragma once

#include <bit>
#include <cstdint>

namespace hora::common {

// cond ? a : b without a branch: GCC does not if-convert every ternary inside a loop, and one
// branch keeps the whole loop scalar.
inline uint32_t selectBits(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

struct Half {
  static inline float toFloat(uint16_t h) {
    constexpr uint32_t kExpMask = 0x7C00u << 13;              // half exponent, in float position
    const float kSubnormalMagic = std::bit_cast<float>(113u << 23);  // 2^-14
    uint32_t bits = (uint32_t{h} & 0x7FFFu) << 13;            // exponent and mantissa
    const uint32_t exp = bits & kExpMask;
    bits += (127u - 15u) << 23;                               // re-bias the exponent
    bits += selectBits(exp == kExpMask, (128u - 16u) << 23, 0u);  // Inf/NaN: exponent all ones
    // Zero and subnormals: the FPU normalizes (bits + 2^23 as a float) - 2^-14.
    const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(bits + (1u << 23)) - kSubnormalMagic);
    bits = selectBits(exp == 0, sub, bits);
    return std::bit_cast<float>(bits | ((uint32_t{h} & 0x8000u) << 16));
  }

  static inline uint16_t fromFloat(float f) {
    constexpr uint32_t kInfinity = 255u << 23;
    constexpr uint32_t kHalfOverflow = (127u + 16u) << 23;  // 65536: beyond the largest half
    constexpr uint32_t kHalfMinNormal = 113u << 23;         // 2^-14
    // Adding this float aligns the half's lowest subnormal bit with float32's lowest bit.
    const float kDenormMagic = std::bit_cast<float>(((127u - 15u) + (23u - 10u) + 1u) << 23);
    uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    const uint32_t special = selectBits(u > kInfinity, 0x7E00u, 0x7C00u);  // NaN stays NaN
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(std::bit_cast<float>(u) + kDenormMagic) - std::bit_cast<uint32_t>(kDenormMagic);
    const uint32_t odd = (u >> 13) & 1u;                        // ties go to the even neighbour
    const uint32_t normal = (u + (((15u - 127u) << 23) + 0xFFFu) + odd) >> 13;
    const uint32_t magnitude =
        selectBits(u >= kHalfOverflow, special, selectBits(u < kHalfMinNormal, subnormal, normal));
    return static_cast<uint16_t>(magnitude | (sign >> 16));
  }
};

struct BFloat16 {
  static inline float toFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }
  static inline uint16_t fromFloat(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    return static_cast<uint16_t>(selectBits(nan, (u >> 16) | 0x0040u, rounded));
  }
};

}  // namespace hora::common
