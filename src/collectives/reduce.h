// Element-wise kernels of the reductions: the only code that touches elements.
//
// float16 and bfloat16 are widened to float32, combined and rounded back once per element
// (round to nearest even), so a chain of reductions rounds once per step as NCCL does. Integer
// Sum and Product wrap around (two's complement) instead of overflowing. The loops are written
// to vectorize; on x86-64 they are compiled twice (baseline and x86-64-v3 with AVX2/F16C) and
// the CPU picks at load time. float16 and bfloat16 have kernels of their own per instruction
// set, with the same results bit for bit (reduce16.h).
#pragma once

#include <cstddef>

#include "hora/types.h"

namespace hora::collectives {

// out[i] = a[i] op b[i] for i < count. out may alias a or b. Average combines like Sum.
void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// out[i] = in[i] * factor (out may alias in). Integers are scaled in double and rounded to
// nearest.
void scale(DataType type, void* out, const void* in, size_t count, double factor);

// Turns a Sum into the final value of `op` over `nranks` ranks times `postscale`: divides for
// Average (integer division for integer types), then scales. No-op when there is nothing to do.
void finalize(DataType type, ReduceOp op, void* out, const void* in, size_t count, int nranks,
              double postscale);
bool needsFinalize(ReduceOp op, double postscale, int nranks);

}  // namespace hora::collectives
