// The float16 and bfloat16 element kernels, one set per instruction set. reduce() and scale()
// (reduce.h) pick a set at run time; the tests call each set by name to compare them.
//
// Every set widens each element to float32, combines in float32 and rounds back once (to
// nearest even), and writes a NaN result as half.h's scalar conversion does (sign kept, quiet,
// payload dropped for float16 and truncated for bfloat16). Sum, Product and scaling return the
// first operand's NaN (a's, or the element's) when both operands are NaN; Min and Max return
// `y < x ? y : x` and `x < y ? y : x` for x from a and y from b. So all sets give the same bits
// for the same inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hora/types.h"

// The x86-64-v3 kernels exist on x86-64 except in the AddressSanitizer and ThreadSanitizer
// builds, which keep to the portable code (as their kernels are not target-cloned either).
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define HORA_X86_64_V3_KERNELS 1
#else
#define HORA_X86_64_V3_KERNELS 0
#endif

namespace hora::collectives::detail {

// `type` is kFloat16 or kBFloat16 in all of these; out may alias a, b or in.

// half.h's scalar conversions, compiled for the baseline instruction set: runs on any CPU.
void reduce16Portable(DataType type, ReduceOp op, uint16_t* out, const uint16_t* a,
                      const uint16_t* b, size_t n);
void scale16Portable(DataType type, uint16_t* out, const uint16_t* in, size_t n, float factor);

// True when this build has the x86-64-v3 kernels and this CPU can run them.
bool haveX86_64V3Kernels();

// F16C conversions for float16, AVX2 integer rounding for bfloat16. Only call them when
// haveX86_64V3Kernels() is true (they are not built at all when HORA_X86_64_V3_KERNELS is 0).
void reduce16X86_64V3(DataType type, ReduceOp op, uint16_t* out, const uint16_t* a,
                      const uint16_t* b, size_t n);
void scale16X86_64V3(DataType type, uint16_t* out, const uint16_t* in, size_t n, float factor);

}  // namespace hora::collectives::detail
