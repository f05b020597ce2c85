// The servers' optimizer state of Exchange::kPsAsync (Note [optimizer state] in src/ps/messages.h)
// as the wrapped libtorch optimizer keeps its own: SGDParamState's momentum_buffer; Adam's and
// AdamW's exp_avg, exp_avg_sq and step; Adagrad's sum and step; RMSprop's momentum_buffer,
// square_avg, grad_avg (centered) and step. So torch::save(optimizer) holds what the servers hold,
// and an optimizer loaded from it starts new servers where the old ones were.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "hora/errors.h"
#include "hora/ps.h"

namespace hora::torch::detail {

// The optimizer's slots for the servers (by slot in hora::PsOptimizerState's order, then by
// parameter), each the tensor in the optimizer's own state: made where missing (zeros; Adagrad's
// sum at its initial accumulator), contiguous float32, so the servers' state can be written into
// it. `step`: the step count the optimizer holds (0 for SGD, which counts none).
struct ServerSlots {
  uint64_t step = 0;
  std::vector<std::vector<at::Tensor>> slots;

  // Addresses as hora::PsOptimizerState takes them.
  PsOptimizerState pointers() const;
};

ServerSlots serverSlots(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                        const PsOptions& options);
// The optimizer's step count of every parameter (Adam, AdamW, Adagrad, RMSprop; SGD has none).
void setServerStep(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, uint64_t step);
// Whether the optimizer holds state for any of `params` (then it is the servers' starting point).
bool hasState(const ::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params);

}  // namespace hora::torch::detail
