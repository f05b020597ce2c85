#include "ps/shard_state.h"

#include <algorithm>
#include <cmath>

#include "ps/nadam.h"

namespace hora::ps {

ShardState::ShardState(std::string name, int workers)
    : name_(std::move(name)),
      workers_(workers),
      replies_(static_cast<size_t>(workers)),
      steps_(static_cast<size_t>(workers), 0),
      left_(static_cast<size_t>(workers), false),
      died_(static_cast<size_t>(workers), false) {}

bool ShardState::async() const {
  std::lock_guard lock(mutex_);
  return config_ && config_->mode == Mode::kAsync;
}

std::vector<float> ShardState::parameters() const {
  std::lock_guard lock(mutex_);
  return params_;
}

bool ShardState::anyDied() const {
  std::lock_guard lock(mutex_);
  return std::find(died_.begin(), died_.end(), true) != died_.end();
}

void ShardState::checkFailed() const {
  if (failure_) rethrowAs(*failure_);
}

std::vector<float> ShardState::registerWorker(int worker, const Registration& r, std::vector<float> initial,
                                              const common::Deadline& deadline) {
  std::unique_lock lock(mutex_);
  if (r.workers != static_cast<uint32_t>(workers_))
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " says the job has " +
                        std::to_string(r.workers) + " workers; this server was started for " +
                        std::to_string(workers_));
  if (r.mode == Mode::kAsync && static_cast<uint32_t>(r.optimizer) > static_cast<uint32_t>(Optimizer::kRadam))
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " registered optimizer " +
                               std::to_string(static_cast<uint32_t>(r.optimizer)) +
                               ", which this server does not know (a worker of a newer hora?)");
  if (r.mode == Mode::kAsync) checkInitial(worker, r, initial.size());
  if (!config_) {
    config_ = r;
    sum_.assign(r.shard_elements, 0.0f);
  } else if (auto why = registrationDifference(*config_, r); !why.empty()) {
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " registered " + why);
  }
  if (r.mode == Mode::kSync) return {};
  if (worker == 0) {
    initialize(r, std::move(initial));
    changed_.notify_all();
  }
  // Every worker starts from worker 0's parameters, so wait for them.
  if (!changed_.wait_until(lock, deadline.at(), [&] { return initialized_; }))
    throw TimeoutError(name_ + ": worker " + std::to_string(worker) + " waited " +
                       std::to_string(deadline.timeout().count()) +
                       " ms for worker 0 to register its initial parameters");
  return params_;
}

void ShardState::checkInitial(int worker, const Registration& r, size_t values) const {
  const uint32_t slots = slotsOf(r.optimizer, r.centered != 0);
  if (r.slots != 0 && r.slots != slots)
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " sent " + std::to_string(r.slots) +
                               " optimizer slots; " + toString(r.optimizer) + " keeps " + std::to_string(slots));
  if (values != r.shard_elements * (1 + r.slots))
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " sent " + std::to_string(values) +
                               " initial values for a shard of " + std::to_string(r.shard_elements) + " and " +
                               std::to_string(r.slots) + " optimizer slots");
}

void ShardState::initialize(const Registration& r, std::vector<float> initial) {
  const size_t n = r.shard_elements;
  velocity_.assign(n, 0.0f);
  if (r.optimizer != Optimizer::kSgd) {
    const bool adagrad = r.optimizer == Optimizer::kAdagrad;
    second_moment_.assign(n, adagrad ? static_cast<float>(r.initial_accumulator) : 0.0f);
  }
  if (r.optimizer == Optimizer::kRmsprop && r.centered) mean_gradient_.assign(n, 0.0f);
  if (r.slots != 0) {
    auto from = initial.begin() + static_cast<std::ptrdiff_t>(n);
    for (auto slot : slots()) {
      std::copy(from, from + static_cast<std::ptrdiff_t>(n), (this->*slot).begin());
      from += static_cast<std::ptrdiff_t>(n);
    }
    step_base_ = r.optimizer_step;
  }
  // NAdam's product of momenta is a function of the step: the workers' optimizers do not send it.
  if (r.optimizer == Optimizer::kNadam) nadam_product_ = nadamMomentumProduct(r.beta1, r.lr_decay, step_base_);
  initial.resize(n);
  params_ = std::move(initial);
  initialized_ = true;
}

std::vector<std::vector<float> ShardState::*> ShardState::slots() const {
  switch (config_->optimizer) {
    case Optimizer::kSgd: return {&ShardState::velocity_};
    case Optimizer::kAdam: return {&ShardState::velocity_, &ShardState::second_moment_};
    case Optimizer::kAdagrad: return {&ShardState::second_moment_};
    case Optimizer::kRmsprop:
      if (config_->centered) return {&ShardState::velocity_, &ShardState::second_moment_, &ShardState::mean_gradient_};
      return {&ShardState::velocity_, &ShardState::second_moment_};
    case Optimizer::kAdamax: return {&ShardState::velocity_, &ShardState::second_moment_};
    case Optimizer::kAdadelta: return {&ShardState::second_moment_, &ShardState::velocity_};
    case Optimizer::kNadam:
    case Optimizer::kRadam: return {&ShardState::velocity_, &ShardState::second_moment_};
  }
  return {};
}

OptimizerState ShardState::optimizerState(int worker) const {
  std::lock_guard lock(mutex_);
  if (!config_ || config_->mode != Mode::kAsync || !initialized_)
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) +
                               " asked for the optimizer's state, which only a ps-async server that has "
                               "registered its workers holds");
  OptimizerState state{step_base_ + applied_, {}};
  for (auto slot : slots()) state.slots.insert(state.slots.end(), (this->*slot).begin(), (this->*slot).end());
  return state;
}

ReplyData ShardState::push(int worker, uint64_t step, const float* gradient, const SgdStep& sgd,
                           const common::Deadline& deadline) {
  std::unique_lock lock(mutex_);
  if (!config_) throw MismatchError(name_ + ": worker " + std::to_string(worker) + " pushed before registering");
  checkFailed();
  if (step != steps_[static_cast<size_t>(worker)] + 1)
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " pushed step " + std::to_string(step) +
                        " after step " + std::to_string(steps_[static_cast<size_t>(worker)]));
  return config_->mode == Mode::kSync ? pushSync(lock, worker, step, gradient, deadline)
                                      : pushAsync(lock, worker, step, gradient, sgd, deadline);
}

ReplyData ShardState::pushSync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                               const common::Deadline& deadline) {
  // A worker's push of step t comes after its reply of step t-1, so the round being summed is t
  // (Note [sync rounds]).
  if (step != round_)
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " pushed step " + std::to_string(step) +
                        " while the servers sum step " + std::to_string(round_));
  // A worker that said goodbye between rounds (its client closed after an error elsewhere, say)
  // failed no round (leave), but no later round can complete without it.
  for (int w = 0; w < workers_; ++w) {
    if (w != worker && left_[static_cast<size_t>(w)] && steps_[static_cast<size_t>(w)] < step)
      throw PeerError(name_ + ": worker " + std::to_string(w) + " left after step " +
                      std::to_string(steps_[static_cast<size_t>(w)]) + "; a ps-sync step needs every worker");
  }
  if (arrived_ == 0) {
    std::copy(g, g + sum_.size(), sum_.begin());  // 0 + g, without a pass to zero the sum first
  } else {
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += g[i];
  }
  steps_[static_cast<size_t>(worker)] = step;
  if (++arrived_ == workers_) {
    result_.swap(sum_);
    if (config_->average) {
      const float n = static_cast<float>(workers_);
      for (float& v : result_) v /= n;  // divide, as the allreduce's Average of float32 does
    }
    sum_.resize(result_.size());  // (the first round's result_ was empty)
    arrived_ = 0;
    ++round_;
    changed_.notify_all();
  }
  if (!changed_.wait_until(lock, deadline.at(), [&] { return round_ > step || failure_; }))
    throw TimeoutError(name_ + ": step " + std::to_string(step) + " of worker " + std::to_string(worker) +
                       " waited " + std::to_string(deadline.timeout().count()) + " ms for " + workersBehind(step));
  if (round_ <= step) checkFailed();
  return {result_, step, slowestLive(), step};
}

ReplyData ShardState::pushAsync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                                const SgdStep& sgd, const common::Deadline& deadline) {
  g = applyWeightDecay(g, sgd.lr);
  switch (config_->optimizer) {
    case Optimizer::kSgd: applySgd(g, sgd); break;
    case Optimizer::kAdam: applyAdam(g, sgd.lr); break;
    case Optimizer::kAdagrad: applyAdagrad(g, sgd.lr); break;
    case Optimizer::kRmsprop: applyRmsprop(g, sgd); break;
    case Optimizer::kAdamax: applyAdamax(g, sgd.lr); break;
    case Optimizer::kAdadelta: applyAdadelta(g, sgd.lr); break;
    case Optimizer::kNadam: applyNadam(g, sgd.lr); break;
    case Optimizer::kRadam: applyRadam(g, sgd.lr); break;
  }
  steps_[static_cast<size_t>(worker)] = step;
  const uint64_t version = ++applied_;
  changed_.notify_all();
  const int64_t s = config_->max_staleness;
  if (s >= 0 && step > static_cast<uint64_t>(s)) {
    const uint64_t need = step - static_cast<uint64_t>(s);
    if (!changed_.wait_until(lock, deadline.at(), [&] { return slowestLive() >= need; }))
      throw TimeoutError(name_ + ": worker " + std::to_string(worker) + " at step " + std::to_string(step) +
                         " (max_staleness " + std::to_string(s) + ") waited " +
                         std::to_string(deadline.timeout().count()) + " ms for " + workersBehind(need));
  }
  auto& reply = replies_[static_cast<size_t>(worker)];
  reply.assign(params_.begin(), params_.end());  // the same size every step: no allocation after the first
  return {reply, step, slowestLive(), version};
}

const float* ShardState::applyWeightDecay(const float* g, float lr) {
  const auto wd = static_cast<float>(config_->weight_decay);
  if (wd == 0) return g;
  if (config_->decoupled_weight_decay) {
    const float keep = 1 - lr * wd;  // torch's AdamW: p *= 1 - lr wd (Keras: p -= p wd lr)
    for (float& p : params_) p *= keep;
    return g;
  }
  decayed_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) decayed_[i] = g[i] + wd * params_[i];
  return decayed_.data();
}

void ShardState::applySgd(const float* g, const SgdStep& sgd) {
  const float lr = sgd.lr, m = sgd.momentum;
  if (config_->keras_form) {
    for (size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] = m * velocity_[i] - lr * g[i];
      params_[i] += velocity_[i];
    }
  } else {
    for (size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] = m * velocity_[i] + g[i];
      params_[i] -= lr * velocity_[i];
    }
  }
}

void ShardState::applyAdam(const float* g, float lr) {
  // As torch.optim.Adam and Keras' Adam compute it (no amsgrad; weight decay came before), with t the
  // server's count of applied pushes (after the registered optimizer_step): every push is one step of
  // the server's optimizer.
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto b1 = static_cast<float>(config_->beta1), b2 = static_cast<float>(config_->beta2);
  const auto eps = static_cast<float>(config_->epsilon);
  const double correction1 = 1.0 - std::pow(config_->beta1, t), correction2 = 1.0 - std::pow(config_->beta2, t);
  if (config_->keras_form) {
    const auto alpha = static_cast<float>(lr * std::sqrt(correction2) / correction1);
    for (size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] += (g[i] - velocity_[i]) * (1 - b1);
      second_moment_[i] += (g[i] * g[i] - second_moment_[i]) * (1 - b2);
      params_[i] -= alpha * velocity_[i] / (std::sqrt(second_moment_[i]) + eps);
    }
  } else {
    const auto step_size = static_cast<float>(lr / correction1);
    const auto root_correction2 = static_cast<float>(std::sqrt(correction2));
    for (size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] = b1 * velocity_[i] + (1 - b1) * g[i];
      second_moment_[i] = b2 * second_moment_[i] + (1 - b2) * g[i] * g[i];
      params_[i] -= step_size * velocity_[i] / (std::sqrt(second_moment_[i]) / root_correction2 + eps);
    }
  }
}

void ShardState::applyAdagrad(const float* g, float lr) {
  // As torch.optim.Adagrad computes it (epsilon added to the root; the lr decays with the step t,
  // here the server's count of applied pushes) or Keras' Adagrad (epsilon inside the root, no
  // decay: lr_decay is 0). No weight decay. Keras 2's legacy Adagrad is torch's form (hora.keras
  // registers it so).
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto clr = static_cast<float>(lr / (1.0 + (t - 1.0) * config_->lr_decay));
  const auto eps = static_cast<float>(config_->epsilon);
  if (config_->keras_form) {
    for (size_t i = 0; i < params_.size(); ++i) {
      second_moment_[i] += g[i] * g[i];
      params_[i] -= clr * g[i] / std::sqrt(second_moment_[i] + eps);
    }
  } else {
    for (size_t i = 0; i < params_.size(); ++i) {
      second_moment_[i] += g[i] * g[i];
      params_[i] -= clr * g[i] / (std::sqrt(second_moment_[i]) + eps);
    }
  }
}

void ShardState::applyRmsprop(const float* g, const SgdStep& sgd) {
  // As torch.optim.RMSprop computes it (epsilon added to the root; the momentum buffer holds
  // g / root, the lr applied after it) or Keras' RMSprop (epsilon inside the root; the buffer holds
  // lr g / root, so a schedule's lr enters it). No weight decay. With momentum 0 the buffer is
  // this step's update alone, what both do without one. Keras 2's legacy RMSprop without a
  // momentum slot is torch's form (hora.keras registers it so).
  const float lr = sgd.lr, m = sgd.momentum;
  const auto a = static_cast<float>(config_->beta2), eps = static_cast<float>(config_->epsilon);
  const bool centered = config_->centered != 0, keras = config_->keras_form != 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    second_moment_[i] = a * second_moment_[i] + (1 - a) * g[i] * g[i];
    float square = second_moment_[i];
    if (centered) {
      mean_gradient_[i] = a * mean_gradient_[i] + (1 - a) * g[i];
      square -= mean_gradient_[i] * mean_gradient_[i];  // the variance's estimate
    }
    if (keras) {
      velocity_[i] = m * velocity_[i] + lr * g[i] / std::sqrt(square + eps);
      params_[i] -= velocity_[i];
    } else {
      velocity_[i] = m * velocity_[i] + g[i] / (std::sqrt(square) + eps);
      params_[i] -= lr * velocity_[i];
    }
  }
}

void ShardState::applyAdamax(const float* g, float lr) {
  // As torch.optim.Adamax: m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) m / u.
  // Keras' Adamax keeps epsilon out of the norm: u = max(b2 u, |g|); p -= lr / (1 - b1^t) m / (u + eps).
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto b1 = static_cast<float>(config_->beta1), b2 = static_cast<float>(config_->beta2);
  const auto eps = static_cast<float>(config_->epsilon);
  const auto clr = static_cast<float>(lr / (1.0 - std::pow(config_->beta1, t)));
  const float inside = config_->keras_form ? 0.0f : eps, outside = config_->keras_form ? eps : 0.0f;
  for (size_t i = 0; i < params_.size(); ++i) {
    velocity_[i] += (g[i] - velocity_[i]) * (1 - b1);
    second_moment_[i] = std::max(b2 * second_moment_[i], std::abs(g[i]) + inside);
    params_[i] -= clr * velocity_[i] / (second_moment_[i] + outside);
  }
}

void ShardState::applyAdadelta(const float* g, float lr) {
  // As torch.optim.Adadelta and Keras' Adadelta compute it (r = beta2, their rho): q = r q + (1 - r)
  // g^2; d = sqrt(a + eps) / sqrt(q + eps) g; a = r a + (1 - r) d^2; p -= lr d.
  const auto r = static_cast<float>(config_->beta2), eps = static_cast<float>(config_->epsilon);
  for (size_t i = 0; i < params_.size(); ++i) {
    second_moment_[i] = r * second_moment_[i] + (1 - r) * g[i] * g[i];
    const float delta = std::sqrt(velocity_[i] + eps) / std::sqrt(second_moment_[i] + eps) * g[i];
    velocity_[i] = r * velocity_[i] + (1 - r) * delta * delta;
    params_[i] -= lr * delta;
  }
}

void ShardState::applyNadam(const float* g, float lr) {
  // As torch.optim.NAdam and Keras' Nadam compute it (Note at the top of shard_state.h), t the
  // server's step; the momenta and their product in double.
  const uint64_t t = step_base_ + applied_ + 1;
  const double u = nadamMomentum(config_->beta1, config_->lr_decay, t);
  const double u_next = nadamMomentum(config_->beta1, config_->lr_decay, t + 1);
  nadam_product_ *= u;
  const double product_next = nadam_product_ * (config_->nadam_twice ? u : 1.0) * u_next;
  const auto b1 = static_cast<float>(config_->beta1), b2 = static_cast<float>(config_->beta2);
  const auto eps = static_cast<float>(config_->epsilon);
  const auto root_correction2 = static_cast<float>(std::sqrt(1.0 - std::pow(config_->beta2, static_cast<double>(t))));
  const auto gradient_step = static_cast<float>(lr * (1.0 - u) / (1.0 - nadam_product_));
  const auto moment_step = static_cast<float>(lr * u_next / (1.0 - product_next));
  for (size_t i = 0; i < params_.size(); ++i) {
    velocity_[i] = b1 * velocity_[i] + (1 - b1) * g[i];
    second_moment_[i] = b2 * second_moment_[i] + (1 - b2) * g[i] * g[i];
    const float denominator = std::sqrt(second_moment_[i]) / root_correction2 + eps;
    params_[i] -= (gradient_step * g[i] + moment_step * velocity_[i]) / denominator;
  }
}

void ShardState::applyRadam(const float* g, float lr) {
  // As torch.optim.RAdam computes it (Note at the top of shard_state.h), t the server's step.
  const auto t = static_cast<double>(step_base_ + applied_ + 1);
  const double b2_power = std::pow(config_->beta2, t);
  const double correction1 = 1.0 - std::pow(config_->beta1, t), correction2 = 1.0 - b2_power;
  const double rho_inf = 2.0 / (1.0 - config_->beta2) - 1.0;
  const double rho_t = rho_inf - 2.0 * t * b2_power / correction2;
  const auto b1 = static_cast<float>(config_->beta1), b2 = static_cast<float>(config_->beta2);
  const auto eps = static_cast<float>(config_->epsilon);
  const auto step_size = static_cast<float>(lr / correction1);
  const bool rectified = rho_t > 5.0;  // the variance is tractable: adapt; else plain momentum
  const auto adaptive = rectified ? static_cast<float>(std::sqrt(correction2 * (rho_t - 4) * (rho_t - 2) * rho_inf /
                                                                 ((rho_inf - 4) * (rho_inf - 2) * rho_t)))
                                  : 0.0f;
  for (size_t i = 0; i < params_.size(); ++i) {
    velocity_[i] = b1 * velocity_[i] + (1 - b1) * g[i];
    second_moment_[i] = b2 * second_moment_[i] + (1 - b2) * g[i] * g[i];
    const float update = step_size * velocity_[i];
    params_[i] -= rectified ? update * adaptive / (std::sqrt(second_moment_[i]) + eps) : update;
  }
}

void ShardState::leave(int worker, bool died, const std::string& why) {
  std::lock_guard lock(mutex_);
  left_[static_cast<size_t>(worker)] = true;
  died_[static_cast<size_t>(worker)] = died;
  const bool sync = !config_ || config_->mode == Mode::kSync;
  if (sync && !failure_ && (died || arrived_ > 0)) {
    // A sync round needs every worker: the others' pushes cannot be summed any more.
    failure_ = PeerError(name_ + ": worker " + std::to_string(worker) + (died ? " died" : " left") + " after step " +
                         std::to_string(steps_[static_cast<size_t>(worker)]) + (why.empty() ? "" : " (" + why + ")") +
                         "; a ps-sync step needs every worker");
  }
  changed_.notify_all();
}

uint64_t ShardState::slowestLive() const {
  uint64_t slowest = UINT64_MAX;
  for (int w = 0; w < workers_; ++w)
    if (!left_[static_cast<size_t>(w)]) slowest = std::min(slowest, steps_[static_cast<size_t>(w)]);
  if (slowest != UINT64_MAX) return slowest;
  return *std::max_element(steps_.begin(), steps_.end());  // nobody left to wait for
}

std::string ShardState::workersBehind(uint64_t step) const {
  std::string list;
  for (int w = 0; w < workers_; ++w) {
    if (left_[static_cast<size_t>(w)] || steps_[static_cast<size_t>(w)] >= step) continue;
    list += (list.empty() ? "" : ", ") + std::string("worker ") + std::to_string(w) + " (at step " +
            std::to_string(steps_[static_cast<size_t>(w)]) + ")";
  }
  return list.empty() ? "no live worker" : list;
}

}  // namespace hora::ps
