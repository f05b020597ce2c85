#include "ps/shard_state.h"

#include <algorithm>
#include <cmath>

#include "ps/nadam.h"

namespace hora::ps {

ShardState::ShardState(std::string name, int workers)
    : name_(std::move(name)),
      workers_(workers),
      steps_(static_cast<size_t>(workers), 0),
      left_(static_cast<size_t>(workers), false),
      died_(static_cast<size_t>(workers), false) {
  wide_.replies.resize(static_cast<size_t>(workers));
  narrow_.replies.resize(static_cast<size_t>(workers));
}

bool ShardState::async() const {
  std::lock_guard lock(mutex_);
  return config_ && config_->mode == Mode::kAsync;
}

std::vector<float> ShardState::parameters() const {
  std::lock_guard lock(mutex_);
  return narrow_.params;
}

std::vector<double> ShardState::wideParameters() const {
  std::lock_guard lock(mutex_);
  return wide_.params;
}

bool ShardState::anyDied() const {
  std::lock_guard lock(mutex_);
  return std::find(died_.begin(), died_.end(), true) != died_.end();
}

void ShardState::checkFailed() const {
  if (failure_) rethrowAs(*failure_);
}

ShardValues ShardState::registerWorker(int worker, const Registration& r, std::vector<float> initial,
                                      const common::Deadline& deadline, std::vector<double> initial_wide) {
  std::unique_lock lock(mutex_);
  if (r.workers != static_cast<uint32_t>(workers_))
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " says the job has " +
                        std::to_string(r.workers) + " workers; this server was started for " +
                        std::to_string(workers_));
  if (r.mode == Mode::kAsync && static_cast<uint32_t>(r.optimizer) > static_cast<uint32_t>(Optimizer::kRadam))
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " registered optimizer " +
                               std::to_string(static_cast<uint32_t>(r.optimizer)) +
                               ", which this server does not know (a worker of a newer hora?)");
  if (r.wide_elements > r.shard_elements || (r.fp16 && r.wide_elements != 0))
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " registered " +
                               std::to_string(r.wide_elements) + " float64 elements of a shard of " +
                               std::to_string(r.shard_elements) + (r.fp16 ? " with fp16 compression" : ""));
  if (r.mode == Mode::kAsync) checkInitial(worker, r, initial.size(), initial_wide.size());
  if (!config_) {
    config_ = r;
    wide_.sum.assign(r.wide_elements, 0.0);
    narrow_.sum.assign(r.shard_elements - r.wide_elements, 0.0f);
  } else if (auto why = registrationDifference(*config_, r); !why.empty()) {
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " registered " + why);
  }
  if (r.mode == Mode::kSync) return {};
  if (worker == 0) {
    initialize(wide_, r, r.wide_elements, std::move(initial_wide));
    initialize(narrow_, r, r.shard_elements - r.wide_elements, std::move(initial));
    // NAdam's product of momenta is a function of the step: the workers' optimizers do not send it.
    if (r.optimizer == Optimizer::kNadam) nadam_product_ = nadamMomentumProduct(r.beta1, r.lr_decay, step_base_);
    initialized_ = true;
    changed_.notify_all();
  }
  // Every worker starts from worker 0's parameters, so wait for them.
  if (!changed_.wait_until(lock, deadline.at(), [&] { return initialized_; }))
    throw TimeoutError(name_ + ": worker " + std::to_string(worker) + " waited " +
                       std::to_string(deadline.timeout().count()) +
                       " ms for worker 0 to register its initial parameters");
  return {wide_.params, narrow_.params};
}

void ShardState::checkInitial(int worker, const Registration& r, size_t values, size_t wide_values) const {
  const uint32_t slots = slotsOf(r.optimizer, r.centered != 0);
  if (r.slots != 0 && r.slots != slots)
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " sent " + std::to_string(r.slots) +
                               " optimizer slots; " + toString(r.optimizer) + " keeps " + std::to_string(slots));
  const uint64_t narrow = r.shard_elements - r.wide_elements;
  if (values != narrow * (1 + r.slots) || wide_values != r.wide_elements * (1 + r.slots))
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) + " sent " + std::to_string(values) +
                               " float32 and " + std::to_string(wide_values) +
                               " float64 initial values for a shard of " +
                               std::to_string(narrow) + " float32 and " + std::to_string(r.wide_elements) +
                               " float64 elements and " + std::to_string(r.slots) + " optimizer slots");
}

template <typename T>
void ShardState::initialize(Region<T>& x, const Registration& r, size_t n, std::vector<T> initial) {
  x.velocity.assign(n, T(0));
  if (r.optimizer != Optimizer::kSgd) {
    const bool adagrad = r.optimizer == Optimizer::kAdagrad;
    x.second_moment.assign(n, adagrad ? static_cast<T>(r.initial_accumulator) : T(0));
  }
  if (r.optimizer == Optimizer::kRmsprop && r.centered) x.mean_gradient.assign(n, T(0));
  if (r.slots != 0) {
    auto from = initial.begin() + static_cast<std::ptrdiff_t>(n);
    for (auto slot : slots<T>()) {
      std::copy(from, from + static_cast<std::ptrdiff_t>(n), (x.*slot).begin());
      from += static_cast<std::ptrdiff_t>(n);
    }
    step_base_ = r.optimizer_step;
  }
  initial.resize(n);
  x.params = std::move(initial);
}

template <typename T>
std::vector<std::vector<T> Region<T>::*> ShardState::slots() const {
  using R = Region<T>;
  switch (config_->optimizer) {
    case Optimizer::kSgd: return {&R::velocity};
    case Optimizer::kAdam: return {&R::velocity, &R::second_moment};
    case Optimizer::kAdagrad: return {&R::second_moment};
    case Optimizer::kRmsprop:
      if (config_->centered) return {&R::velocity, &R::second_moment, &R::mean_gradient};
      return {&R::velocity, &R::second_moment};
    case Optimizer::kAdamax: return {&R::velocity, &R::second_moment};
    case Optimizer::kAdadelta: return {&R::second_moment, &R::velocity};
    case Optimizer::kNadam:
    case Optimizer::kRadam: return {&R::velocity, &R::second_moment};
  }
  return {};
}

OptimizerState ShardState::optimizerState(int worker) const {
  std::lock_guard lock(mutex_);
  if (!config_ || config_->mode != Mode::kAsync || !initialized_)
    throw InvalidArgumentError(name_ + ": worker " + std::to_string(worker) +
                               " asked for the optimizer's state, which only a ps-async server that has "
                               "registered its workers holds");
  OptimizerState state{step_base_ + applied_, {}, {}};
  for (auto slot : slots<float>())
    state.slots.insert(state.slots.end(), (narrow_.*slot).begin(), (narrow_.*slot).end());
  for (auto slot : slots<double>())
    state.wide_slots.insert(state.wide_slots.end(), (wide_.*slot).begin(), (wide_.*slot).end());
  return state;
}

ReplyData ShardState::push(int worker, uint64_t step, const float* gradient, const SgdStep& sgd,
                           const common::Deadline& deadline, const double* wide_gradient) {
  std::unique_lock lock(mutex_);
  if (!config_) throw MismatchError(name_ + ": worker " + std::to_string(worker) + " pushed before registering");
  checkFailed();
  if (step != steps_[static_cast<size_t>(worker)] + 1)
    throw MismatchError(name_ + ": worker " + std::to_string(worker) + " pushed step " + std::to_string(step) +
                        " after step " + std::to_string(steps_[static_cast<size_t>(worker)]));
  return config_->mode == Mode::kSync ? pushSync(lock, worker, step, gradient, wide_gradient, deadline)
                                      : pushAsync(lock, worker, step, gradient, wide_gradient, sgd, deadline);
}

ReplyData ShardState::pushSync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                               const double* wide_g, const common::Deadline& deadline) {
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
  addToRound(wide_, wide_g);
  addToRound(narrow_, g);
  steps_[static_cast<size_t>(worker)] = step;
  if (++arrived_ == workers_) {
    completeRound(wide_);
    completeRound(narrow_);
    arrived_ = 0;
    ++round_;
    changed_.notify_all();
  }
  if (!changed_.wait_until(lock, deadline.at(), [&] { return round_ > step || failure_; }))
    throw TimeoutError(name_ + ": step " + std::to_string(step) + " of worker " + std::to_string(worker) +
                       " waited " + std::to_string(deadline.timeout().count()) + " ms for " + workersBehind(step));
  if (round_ <= step) checkFailed();
  return {narrow_.result, wide_.result, step, slowestLive(), step};
}

template <typename T>
void ShardState::addToRound(Region<T>& x, const T* g) const {
  if (arrived_ == 0) {
    std::copy(g, g + x.sum.size(), x.sum.begin());  // 0 + g, without a pass to zero the sum first
  } else {
    for (size_t i = 0; i < x.sum.size(); ++i) x.sum[i] += g[i];
  }
}

template <typename T>
void ShardState::completeRound(Region<T>& x) const {
  x.result.swap(x.sum);
  if (config_->average) {
    const T n = static_cast<T>(workers_);
    for (T& v : x.result) v /= n;  // divide, as the allreduce's Average does
  }
  x.sum.resize(x.result.size());  // (the first round's result was empty)
}

ReplyData ShardState::pushAsync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                                const double* wide_g, const SgdStep& sgd, const common::Deadline& deadline) {
  applyOptimizer(wide_, applyWeightDecay(wide_, wide_g, sgd.lr), sgd);
  applyOptimizer(narrow_, applyWeightDecay(narrow_, g, sgd.lr), sgd);
  // NAdam's product of momenta advances once per push, after both regions used u_t (applyNadam).
  if (config_->optimizer == Optimizer::kNadam)
    nadam_product_ *= nadamMomentum(config_->beta1, config_->lr_decay, step_base_ + applied_ + 1);
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
  // The same size every step: no allocation after the first.
  auto& narrow = narrow_.replies[static_cast<size_t>(worker)];
  narrow.assign(narrow_.params.begin(), narrow_.params.end());
  auto& wide = wide_.replies[static_cast<size_t>(worker)];
  wide.assign(wide_.params.begin(), wide_.params.end());
  return {narrow, wide, step, slowestLive(), version};
}

template <typename T>
const T* ShardState::applyWeightDecay(Region<T>& x, const T* g, double lr_value) {
  const auto wd = static_cast<T>(config_->weight_decay);
  if (wd == 0) return g;
  const auto lr = static_cast<T>(lr_value);
  if (config_->decoupled_weight_decay) {
    const T keep = 1 - lr * wd;  // torch's AdamW: p *= 1 - lr wd (Keras: p -= p wd lr)
    for (T& p : x.params) p *= keep;
    return g;
  }
  x.decayed.resize(x.params.size());
  for (size_t i = 0; i < x.params.size(); ++i) x.decayed[i] = g[i] + wd * x.params[i];
  return x.decayed.data();
}

template <typename T>
void ShardState::applyOptimizer(Region<T>& x, const T* g, const SgdStep& sgd) {
  switch (config_->optimizer) {
    case Optimizer::kSgd: applySgd(x, g, sgd); break;
    case Optimizer::kAdam: applyAdam(x, g, sgd.lr); break;
    case Optimizer::kAdagrad: applyAdagrad(x, g, sgd.lr); break;
    case Optimizer::kRmsprop: applyRmsprop(x, g, sgd); break;
    case Optimizer::kAdamax: applyAdamax(x, g, sgd.lr); break;
    case Optimizer::kAdadelta: applyAdadelta(x, g, sgd.lr); break;
    case Optimizer::kNadam: applyNadam(x, g, sgd.lr); break;
    case Optimizer::kRadam: applyRadam(x, g, sgd.lr); break;
  }
}

template <typename T>
void ShardState::applySgd(Region<T>& x, const T* g, const SgdStep& sgd) {
  const auto lr = static_cast<T>(sgd.lr), m = static_cast<T>(sgd.momentum);
  if (config_->keras_form) {
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.velocity[i] = m * x.velocity[i] - lr * g[i];
      x.params[i] += x.velocity[i];
    }
  } else {
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.velocity[i] = m * x.velocity[i] + g[i];
      x.params[i] -= lr * x.velocity[i];
    }
  }
}

template <typename T>
void ShardState::applyAdam(Region<T>& x, const T* g, double lr) {
  // As torch.optim.Adam and Keras' Adam compute it (no amsgrad; weight decay came before), with t the
  // server's count of applied pushes (after the registered optimizer_step): every push is one step of
  // the server's optimizer.
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto b1 = static_cast<T>(config_->beta1), b2 = static_cast<T>(config_->beta2);
  const auto eps = static_cast<T>(config_->epsilon);
  const double correction1 = 1.0 - std::pow(config_->beta1, t), correction2 = 1.0 - std::pow(config_->beta2, t);
  if (config_->keras_form) {
    const auto alpha = static_cast<T>(lr * std::sqrt(correction2) / correction1);
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.velocity[i] += (g[i] - x.velocity[i]) * (1 - b1);
      x.second_moment[i] += (g[i] * g[i] - x.second_moment[i]) * (1 - b2);
      x.params[i] -= alpha * x.velocity[i] / (std::sqrt(x.second_moment[i]) + eps);
    }
  } else {
    const auto step_size = static_cast<T>(lr / correction1);
    const auto root_correction2 = static_cast<T>(std::sqrt(correction2));
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.velocity[i] = b1 * x.velocity[i] + (1 - b1) * g[i];
      x.second_moment[i] = b2 * x.second_moment[i] + (1 - b2) * g[i] * g[i];
      x.params[i] -= step_size * x.velocity[i] / (std::sqrt(x.second_moment[i]) / root_correction2 + eps);
    }
  }
}

template <typename T>
void ShardState::applyAdagrad(Region<T>& x, const T* g, double lr) {
  // As torch.optim.Adagrad computes it (epsilon added to the root; the lr decays with the step t,
  // here the server's count of applied pushes) or Keras' Adagrad (epsilon inside the root, no
  // decay: lr_decay is 0). No weight decay. Keras 2's legacy Adagrad is torch's form (hora.keras
  // registers it so).
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto clr = static_cast<T>(lr / (1.0 + (t - 1.0) * config_->lr_decay));
  const auto eps = static_cast<T>(config_->epsilon);
  if (config_->keras_form) {
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.second_moment[i] += g[i] * g[i];
      x.params[i] -= clr * g[i] / std::sqrt(x.second_moment[i] + eps);
    }
  } else {
    for (size_t i = 0; i < x.params.size(); ++i) {
      x.second_moment[i] += g[i] * g[i];
      x.params[i] -= clr * g[i] / (std::sqrt(x.second_moment[i]) + eps);
    }
  }
}

template <typename T>
void ShardState::applyRmsprop(Region<T>& x, const T* g, const SgdStep& sgd) {
  // As torch.optim.RMSprop computes it (epsilon added to the root; the momentum buffer holds
  // g / root, the lr applied after it) or Keras' RMSprop (epsilon inside the root; the buffer holds
  // lr g / root, so a schedule's lr enters it). No weight decay. With momentum 0 the buffer is
  // this step's update alone, what both do without one. Keras 2's legacy RMSprop without a
  // momentum slot is torch's form (hora.keras registers it so).
  const auto lr = static_cast<T>(sgd.lr), m = static_cast<T>(sgd.momentum);
  const auto a = static_cast<T>(config_->beta2), eps = static_cast<T>(config_->epsilon);
  const bool centered = config_->centered != 0, keras = config_->keras_form != 0;
  for (size_t i = 0; i < x.params.size(); ++i) {
    x.second_moment[i] = a * x.second_moment[i] + (1 - a) * g[i] * g[i];
    T square = x.second_moment[i];
    if (centered) {
      x.mean_gradient[i] = a * x.mean_gradient[i] + (1 - a) * g[i];
      square -= x.mean_gradient[i] * x.mean_gradient[i];  // the variance's estimate
    }
    if (keras) {
      x.velocity[i] = m * x.velocity[i] + lr * g[i] / std::sqrt(square + eps);
      x.params[i] -= x.velocity[i];
    } else {
      x.velocity[i] = m * x.velocity[i] + g[i] / (std::sqrt(square) + eps);
      x.params[i] -= lr * x.velocity[i];
    }
  }
}

template <typename T>
void ShardState::applyAdamax(Region<T>& x, const T* g, double lr) {
  // As torch.optim.Adamax: m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) m / u.
  // Keras' Adamax keeps epsilon out of the norm: u = max(b2 u, |g|); p -= lr / (1 - b1^t) m / (u + eps).
  const double t = static_cast<double>(step_base_ + applied_ + 1);
  const auto b1 = static_cast<T>(config_->beta1), b2 = static_cast<T>(config_->beta2);
  const auto eps = static_cast<T>(config_->epsilon);
  const auto clr = static_cast<T>(lr / (1.0 - std::pow(config_->beta1, t)));
  const T inside = config_->keras_form ? T(0) : eps, outside = config_->keras_form ? eps : T(0);
  for (size_t i = 0; i < x.params.size(); ++i) {
    x.velocity[i] += (g[i] - x.velocity[i]) * (1 - b1);
    x.second_moment[i] = std::max(b2 * x.second_moment[i], std::abs(g[i]) + inside);
    x.params[i] -= clr * x.velocity[i] / (x.second_moment[i] + outside);
  }
}

template <typename T>
void ShardState::applyAdadelta(Region<T>& x, const T* g, double lr) {
  // As torch.optim.Adadelta and Keras' Adadelta compute it (r = beta2, their rho): q = r q + (1 - r)
  // g^2; d = sqrt(a + eps) / sqrt(q + eps) g; a = r a + (1 - r) d^2; p -= lr d.
  const auto r = static_cast<T>(config_->beta2), eps = static_cast<T>(config_->epsilon);
  const auto step = static_cast<T>(lr);
  for (size_t i = 0; i < x.params.size(); ++i) {
    x.second_moment[i] = r * x.second_moment[i] + (1 - r) * g[i] * g[i];
    const T delta = std::sqrt(x.velocity[i] + eps) / std::sqrt(x.second_moment[i] + eps) * g[i];
    x.velocity[i] = r * x.velocity[i] + (1 - r) * delta * delta;
    x.params[i] -= step * delta;
  }
}

template <typename T>
void ShardState::applyNadam(Region<T>& x, const T* g, double lr) {
  // As torch.optim.NAdam and Keras' Nadam compute it (Note at the top of shard_state.h), t the
  // server's step; the momenta and their product in double (pushAsync advances nadam_product_ to
  // `product` once both regions are done).
  const uint64_t t = step_base_ + applied_ + 1;
  const double u = nadamMomentum(config_->beta1, config_->lr_decay, t);
  const double u_next = nadamMomentum(config_->beta1, config_->lr_decay, t + 1);
  const double product = nadam_product_ * u;
  const double product_next = product * (config_->nadam_twice ? u : 1.0) * u_next;
  const auto b1 = static_cast<T>(config_->beta1), b2 = static_cast<T>(config_->beta2);
  const auto eps = static_cast<T>(config_->epsilon);
  const auto root_correction2 = static_cast<T>(std::sqrt(1.0 - std::pow(config_->beta2, static_cast<double>(t))));
  const auto gradient_step = static_cast<T>(lr * (1.0 - u) / (1.0 - product));
  const auto moment_step = static_cast<T>(lr * u_next / (1.0 - product_next));
  for (size_t i = 0; i < x.params.size(); ++i) {
    x.velocity[i] = b1 * x.velocity[i] + (1 - b1) * g[i];
    x.second_moment[i] = b2 * x.second_moment[i] + (1 - b2) * g[i] * g[i];
    const T denominator = std::sqrt(x.second_moment[i]) / root_correction2 + eps;
    x.params[i] -= (gradient_step * g[i] + moment_step * x.velocity[i]) / denominator;
  }
}

template <typename T>
void ShardState::applyRadam(Region<T>& x, const T* g, double lr) {
  // As torch.optim.RAdam computes it (Note at the top of shard_state.h), t the server's step.
  const auto t = static_cast<double>(step_base_ + applied_ + 1);
  const double b2_power = std::pow(config_->beta2, t);
  const double correction1 = 1.0 - std::pow(config_->beta1, t), correction2 = 1.0 - b2_power;
  const double rho_inf = 2.0 / (1.0 - config_->beta2) - 1.0;
  const double rho_t = rho_inf - 2.0 * t * b2_power / correction2;
  const auto b1 = static_cast<T>(config_->beta1), b2 = static_cast<T>(config_->beta2);
  const auto eps = static_cast<T>(config_->epsilon);
  const auto step_size = static_cast<T>(lr / correction1);
  const bool rectified = rho_t > 5.0;  // the variance is tractable: adapt; else plain momentum
  const auto adaptive = rectified ? static_cast<T>(std::sqrt(correction2 * (rho_t - 4) * (rho_t - 2) * rho_inf /
                                                                 ((rho_inf - 4) * (rho_inf - 2) * rho_t)))
                                  : T(0);
  for (size_t i = 0; i < x.params.size(); ++i) {
    x.velocity[i] = b1 * x.velocity[i] + (1 - b1) * g[i];
    x.second_moment[i] = b2 * x.second_moment[i] + (1 - b2) * g[i] * g[i];
    const T update = step_size * x.velocity[i];
    x.params[i] -= rectified ? update * adaptive / (std::sqrt(x.second_moment[i]) + eps) : update;
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
