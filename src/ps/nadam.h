// NAdam's momentum schedule, shared by the servers, which apply it, and the workers, which write
// the product of momenta into their optimizer's state after a pull: the product is a function of
// the step and is never sent (Note at the top of shard_state.h).
#pragma once

#include <cmath>
#include <cstdint>

namespace hora::ps {

// u_t = beta1 (1 - 0.96^(t momentum_decay) / 2): the momentum of step t (t from 1).
inline double nadamMomentum(double beta1, double momentum_decay, uint64_t t) {
  return beta1 * (1.0 - 0.5 * std::pow(0.96, static_cast<double>(t) * momentum_decay));
}

// u_1 ... u_steps: torch's mu_product, Keras' _u_product after `steps` steps.
inline double nadamMomentumProduct(double beta1, double momentum_decay, uint64_t steps) {
  double product = 1.0;
  for (uint64_t t = 1; t <= steps; ++t) product *= nadamMomentum(beta1, momentum_decay, t);
  return product;
}

}  // namespace hora::ps
