// Element-wise kernels of the reductions: the only code that touches elements.
//
// Scaling and Average follow Horovod's CPU arithmetic (hora/options.h): integers are scaled in
// double and truncated toward zero, and Average is Sum scaled by postscale / n. bool reduces
// with logical or (Sum, Max) and and (Product, Min) and takes no scaling.
//
// float16 and bfloat16 are widened to float32, combined and rounded back once per element
// (round to nearest even), so a chain of reductions rounds once per step as NCCL does. Integer
// Sum and Product wrap around (two's complement) instead of overflowing. The loops are written
// to vectorize; on x86-64 they are compiled twice (baseline and x86-64-v3 with AVX2/F16C) and
// the CPU picks at load time. float16 and bfloat16 have kernels of their own per instruction
// set, with the same results bit for bit (reduce16.h).
#pragma once

#include <cstddef>
#include <string>

#include "hora/options.h"
#include "hora/types.h"

namespace hora::collectives {

// out[i] = a[i] op b[i] for i < count. out may alias a or b. Average combines like Sum.
void reduce(DataType type, ReduceOp op, void* out, const void* a, const void* b, size_t count);

// out[i] = in[i] * factor (out may alias in). Integers are scaled in double and truncated
// toward zero. Throws InvalidArgumentError for bool.
void scale(DataType type, void* out, const void* in, size_t count, double factor);

// Turns a Sum into the final value of `op` over `nranks` ranks times `postscale`: scales by
// postscale / nranks for Average, by postscale otherwise; a plain Average of float32 or float64
// divides by nranks instead (the correctly rounded mean). No-op when there is nothing to do.
void finalize(DataType type, ReduceOp op, void* out, const void* in, size_t count, int nranks,
              double postscale);
bool needsFinalize(ReduceOp op, double postscale, int nranks);

// Why elements of `type` cannot be reduced with `o` (an unknown type or op, a factor that is not
// finite, bool with Average or a scale factor), or empty when they can. The one check of both
// the Communicator and the engine's enqueue.
std::string whyNotReducible(DataType type, const AllreduceOptions& o);

}  // namespace hora::collectives
