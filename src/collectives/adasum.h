// Adasum allreduce: Horovod's CPU Adasum (AdasumMPI), flat across every rank of the communicator.
//
// Note [adasum]: Adasum combines two partial results a and b of one tensor as
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 when its norm squared is below sqrt(DBL_MIN), as in Horovod), so
// orthogonal gradients add and parallel ones average. The order of the combinations is
// Horovod's vector-halving, distance-doubling (VHDD) one on n = 2^k ranks:
//   - reduce-scatter, level = 1, 2, 4, ..., n/2: rank r and its *partner* r ^ level hold the same
//     *window* of the buffer; the one with (r & level) == 0 (the *left* one, whose data is the
//     combination of the lower ranks) keeps the window's first half (floor(size / 2) elements),
//     the other the second half, and each sends the half it gives up to the partner. The dot
//     product and both norms of each tensor are then summed over the 2 * level ranks of the
//     *group* (the ranks that agree with r on the bits above level), whose windows tile the
//     buffer, so the coefficients are those of whole tensors; each rank combines its half.
//   - allgather, level = n/2, ..., 1: partners swap their windows, so every rank ends with the
//     whole result.
// The result is therefore the pairwise tree adasum(adasum(r0, r1), adasum(r2, r3)) ... with the
// lower ranks' side as `a`. A fused buffer holds several tensors (AllreduceOptions::tensor_counts):
// each gets its own coefficients, as in Horovod, which passes tensor counts to the algorithm.
// Dot products and norms accumulate in double; float16 and bfloat16 combine in float32 and
// float32 and float64 in double, rounding once per element and level.
//
// Like Horovod on CPU, it runs flat on all ranks (no hierarchy), and only on a power-of-two
// number of ranks: the Communicator and the engine refuse other sizes, integer and bool
// tensors before anything moves.
#pragma once

#include <string>

#include "collectives/algorithms.h"

namespace hora::collectives {

// Why Adasum cannot run on `ranks` ranks with `count` elements split into `tensor_counts`
// (a size that is not a power of two, counts that do not add up), or empty when it can.
std::string whyNotAdasum(int ranks, size_t count, std::span<const size_t> tensor_counts);

// Adasum allreduce of `count` elements (Note [adasum]); `send` may equal `recv`. Prescaling is the
// caller's; the result is multiplied by options.postscale.
void adasumAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count, DataType type,
                     const AllreduceOptions& options);

}  // namespace hora::collectives
