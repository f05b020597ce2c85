#include "server_state.h"

#include <memory>
#include <string>
#include <type_traits>

namespace hora::torch::detail {

namespace {

std::string keyOf(const at::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// The optimizer's state of `p` as StateT, made (default) where it has none yet.
template <typename StateT>
StateT& stateOf(::torch::optim::Optimizer& optimizer, const at::Tensor& p) {
  auto& state = optimizer.state()[keyOf(p)];
  if (!state) state = std::make_unique<StateT>();
  auto* typed = dynamic_cast<StateT*>(state.get());
  if (!typed) throw InvalidArgumentError("DistributedOptimizer: the optimizer's state of a parameter is of another "
                                         "optimizer class than the one the servers run");
  return *typed;
}

// `t` as a slot of `p`: defined (filled with `start` if not), contiguous, p's shape, in the type
// the servers hold p's elements in: float64 for a float64 parameter, float32 for the others.
at::Tensor slotOf(const at::Tensor& t, const at::Tensor& p, double start) {
  const at::ScalarType served = p.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (!t.defined()) return at::full(p.sizes(), start, p.options().dtype(served));
  if (!t.sizes().equals(p.sizes()))
    throw InvalidArgumentError("DistributedOptimizer: an optimizer state tensor of shape " + c10::str(t.sizes()) +
                               " belongs to a parameter of shape " + c10::str(p.sizes()));
  return t.to(served).contiguous();
}

// The slots of StateT, each given as a function from the state to its tensor (a reference):
// made or converted (slotOf) in the optimizer's own state, so the servers' answer lands there.
template <typename StateT, typename... Slots>
void collect(ServerSlots& out, ::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
             double start, Slots... slots) {
  out.slots.assign(sizeof...(Slots), {});
  for (const at::Tensor& p : params) {
    StateT& state = stateOf<StateT>(optimizer, p);
    size_t i = 0;
    ((slots(state) = slotOf(slots(state), p, start), out.slots[i++].push_back(slots(state))), ...);
    if constexpr (!std::is_same_v<StateT, ::torch::optim::SGDParamState>)
      out.step = static_cast<uint64_t>(state.step());
  }
}

template <typename StateT>
void setStep(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, uint64_t step) {
  for (const at::Tensor& p : params) stateOf<StateT>(optimizer, p).step(static_cast<int64_t>(step));
}

}  // namespace

PsOptimizerState ServerSlots::pointers() const {
  PsOptimizerState state;
  state.step = step;
  for (const auto& slot : slots) {
    state.slots.emplace_back();
    for (const at::Tensor& t : slot) state.slots.back().push_back(t.data_ptr());
  }
  return state;
}

ServerSlots serverSlots(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                        const PsOptions& options) {
  namespace optim = ::torch::optim;
  const auto momentum_buffer = [](auto& s) -> at::Tensor& { return s.momentum_buffer(); };
  const auto exp_avg = [](auto& s) -> at::Tensor& { return s.exp_avg(); };
  const auto exp_avg_sq = [](auto& s) -> at::Tensor& { return s.exp_avg_sq(); };
  const auto square_avg = [](auto& s) -> at::Tensor& { return s.square_avg(); };
  ServerSlots out;
  switch (options.optimizer) {
    case PsOptimizer::kSgd:
      collect<optim::SGDParamState>(out, optimizer, params, 0.0, momentum_buffer);
      break;
    case PsOptimizer::kAdam:
      if (options.decoupled_weight_decay) {
        collect<optim::AdamWParamState>(out, optimizer, params, 0.0, exp_avg, exp_avg_sq);
      } else {
        collect<optim::AdamParamState>(out, optimizer, params, 0.0, exp_avg, exp_avg_sq);
      }
      break;
    case PsOptimizer::kAdagrad:
      collect<optim::AdagradParamState>(out, optimizer, params, options.initial_accumulator_value,
                                        [](auto& s) -> at::Tensor& { return s.sum(); });
      break;
    case PsOptimizer::kRmsprop:
      if (options.centered) {
        collect<optim::RMSpropParamState>(out, optimizer, params, 0.0, momentum_buffer, square_avg,
                                          [](auto& s) -> at::Tensor& { return s.grad_avg(); });
      } else {
        collect<optim::RMSpropParamState>(out, optimizer, params, 0.0, momentum_buffer, square_avg);
      }
      break;
    case PsOptimizer::kAdamax:
    case PsOptimizer::kAdadelta:
    case PsOptimizer::kNadam:
    case PsOptimizer::kRadam:  // libtorch has none of them, so no wrapped optimizer registers them
      throw InvalidArgumentError("libtorch has no Adamax, Adadelta, NAdam or RAdam");
  }
  return out;
}

void setServerStep(::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params, uint64_t step) {
  namespace optim = ::torch::optim;
  if (dynamic_cast<optim::Adam*>(&optimizer)) return setStep<optim::AdamParamState>(optimizer, params, step);
  if (dynamic_cast<optim::AdamW*>(&optimizer)) return setStep<optim::AdamWParamState>(optimizer, params, step);
  if (dynamic_cast<optim::Adagrad*>(&optimizer)) return setStep<optim::AdagradParamState>(optimizer, params, step);
  if (dynamic_cast<optim::RMSprop*>(&optimizer)) return setStep<optim::RMSpropParamState>(optimizer, params, step);
}

bool hasState(const ::torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params)
    if (optimizer.state().count(keyOf(p))) return true;
  return false;
}

}  // namespace hora::torch::detail
