// ShardState: what one parameter server holds for its shard, shared by its session threads (one
// per worker, server.h).
//
// Note [sync rounds]: in sync mode, round t sums the pushes of step t from every worker into
// each Region's `sum`; the push that completes the round moves the sum (or mean) into `result` and
// starts the next round, and every session of round t replies from `result` itself. Round t+1 cannot
// complete before every session has sent round t's result, since a session reads its worker's
// push of step t+1 only after sending the reply of step t, so one result buffer is enough and
// nothing is copied.
// Async mode: a push is applied at once with the registered optimizer, at the lr (and momentum)
// the push carries, t being the pushes this server applied (this one included), in torch's form
// or Keras' (keras_form):
//   SGD with momentum: torch.optim.SGD v = m v + g, p -= lr v; Keras v = m v - lr g, p += v.
//   Adam (m, v the moments): torch p -= lr m^ / (sqrt(v^) + eps); Keras p -= lr sqrt(1 - b2^t) /
//     (1 - b1^t) m / (sqrt(v) + eps).
//   Adagrad (s = initial_accumulator + the sum of g^2): torch p -= lr / (1 + (t - 1) lr_decay) g /
//     (sqrt(s) + eps); Keras p -= lr g / sqrt(s + eps).
//   RMSprop (a = beta2; q = a q + (1 - a) g^2, centered: c = a c + (1 - a) g and q - c^2 for q
//     below; b the momentum buffer): torch b = m b + g / (sqrt(q) + eps), p -= lr b; Keras b = m b
//     + lr g / sqrt(q + eps), p -= b.
//   Adamax (m, u = the infinity norm): p -= lr / (1 - b1^t) m / u, u = max(b2 u, |g| + eps);
//     Adadelta (r = beta2; q, a the mean squares of the gradient and the update): d = sqrt(a + eps)
//     / sqrt(q + eps) g, p -= lr d. torch's form only (hora.keras does not register them).
//   NAdam (m, v as Adam's; u_t = b1 (1 - 0.96^(t d) / 2) the momentum at step t, P_t the product
//     of u_1..u_t): p -= lr ((1 - u_t) g / (1 - P_t) + u_(t+1) m / (1 - P_t u_(t+1))) /
//     (sqrt(v / (1 - b2^t)) + eps); torch < 2.0 has P_t u_t u_(t+1) in the second quotient.
//     torch's and Keras' alike (Keras' d is 1).
//   RAdam (torch's; r the length of the approximated moving average, r_inf = 2 / (1 - b2) - 1,
//     r_t = r_inf - 2 t b2^t / (1 - b2^t)): p -= lr m / (1 - b1^t) times, when r_t > 5,
//     rect sqrt(1 - b2^t) / (sqrt(v) + eps), rect = sqrt((r_t - 4)(r_t - 2) r_inf / ((r_inf - 4)
//     (r_inf - 2) r_t)).
// Weight decay, before any of these: coupled (torch's weight_decay) g += wd p; decoupled (torch's
// AdamW, Keras' weight_decay) p -= lr wd p.
// With max_staleness = s the reply then waits until every live worker has had at
// least (this worker's steps - s) applied (stale synchronous parallel). Workers that left (bye)
// or died no longer hold anyone back.
//
// Thread safety: every method may be called from any session thread; one mutex guards the
// state and one condition variable signals rounds, applied steps, registrations and failures.
// Every wait ends at its deadline with TimeoutError naming the workers waited for.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "hora/errors.h"
#include "ps/messages.h"

namespace hora::ps {

struct ReplyData {
  // Valid until this worker's next push (sync: the round's result; async: this worker's copy of
  // the parameters, taken under the lock since the other workers' pushes change them).
  std::span<const float> values;  // the shard's float32 elements
  std::span<const double> wide;   // its float64 elements (ShardLayout: first in a payload)
  uint64_t step = 0;
  uint64_t slowest = 0;
  uint64_t version = 0;  // async: this push's place in the order the server applied pushes
};

// What a push is applied with in async mode: the worker's optimizer's values at that step, so
// that a learning-rate schedule or warm-up reaches the servers (momentum: SGD's and RMSprop's).
// In double: a float64 element's update uses them as they are, a float32 one's rounded.
struct SgdStep {
  double lr = 0;
  double momentum = 0;
};

// Note [optimizer state] (messages.h): an async server's optimizer slots, one after another, and
// the step count they were reached at; the float32 elements' and the float64 elements'.
struct OptimizerState {
  uint64_t step = 0;
  std::vector<float> slots;
  std::vector<double> wide_slots;
};

// A shard's values of both element types, as a registration's reply carries them.
struct ShardValues {
  std::vector<double> wide;
  std::vector<float> narrow;
};

// Note [element types]: a shard holds float32 and float64 elements (Registration::wide_elements
// of them float64). Each type has a Region: its parameters, optimizer slots and sync sums, every
// element held, summed and applied in its own type. Each optimizer's arithmetic is written once,
// as a template over the element type; what a push computes per step (bias corrections, NAdam's
// momenta) is computed once in double and rounded to the element type at the loop.
template <typename T>
struct Region {
  // async: velocity is SGD's velocity, Adam's and Adamax's first moment, RMSprop's momentum
  // buffer, Adadelta's mean squared update; second_moment Adam's second moment, Adagrad's sum of
  // squares, RMSprop's and Adadelta's mean square, Adamax's infinity norm; mean_gradient
  // centered RMSprop's mean gradient. NAdam and RAdam use velocity and second_moment as Adam does.
  std::vector<T> params, velocity, second_moment, mean_gradient;
  std::vector<T> decayed;               // async, coupled weight decay: g + wd p
  std::vector<T> sum, result;           // sync
  std::vector<std::vector<T>> replies;  // async, by worker: the parameters its reply sends
};

class ShardState {
 public:
  // `name`: how messages name this server ("parameter server 1").
  ShardState(std::string name, int workers);

  // The first registration fixes the job's options; a later one that differs throws
  // MismatchError naming the field. Async: `initial` (float32 elements) and `initial_wide`
  // (float64 elements) of worker 0 become the parameters (and, when r.slots is set, the
  // optimizer's state from the slots that follow them in each), and every registration waits for
  // it; returns the parameters (sync: nothing).
  ShardValues registerWorker(int worker, const Registration& r, std::vector<float> initial,
                             const common::Deadline& deadline, std::vector<double> initial_wide = {});
  // Step `step` (1, 2, ...) of `worker`: its gradient shard in (`gradient` its float32 elements,
  // `wide_gradient` its float64 ones), the reply out. Async: applied with `sgd`, the worker's
  // learning rate and momentum at this step.
  ReplyData push(int worker, uint64_t step, const float* gradient, const SgdStep& sgd,
                 const common::Deadline& deadline, const double* wide_gradient = nullptr);
  // Async: a copy of the optimizer's state now (InvalidArgumentError in a sync job, whose
  // servers hold none).
  OptimizerState optimizerState(int worker) const;
  // The worker said goodbye (died = false) or its connection broke (died = true, `why`).
  void leave(int worker, bool died, const std::string& why);

  // For tests and the exit status.
  std::vector<float> parameters() const;
  std::vector<double> wideParameters() const;
  bool anyDied() const;
  bool async() const;

 private:
  ReplyData pushSync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                     const double* wide_g, const common::Deadline& deadline);
  ReplyData pushAsync(std::unique_lock<std::mutex>& lock, int worker, uint64_t step, const float* g,
                      const double* wide_g, const SgdStep& sgd, const common::Deadline& deadline);
  // mutex_ held: `g` into the round's sum (the round's first push: copied), and the sum into the
  // result (the mean, when registered so) once the round completes.
  template <typename T> void addToRound(Region<T>& x, const T* g) const;
  template <typename T> void completeRound(Region<T>& x) const;
  // mutex_ held: the registered weight decay, coupled (returns g + wd p) or decoupled (decays the
  // parameters, returns g).
  template <typename T> const T* applyWeightDecay(Region<T>& x, const T* g, double lr);
  // mutex_ held: one push of gradient `g` to region `x` with the registered optimizer.
  template <typename T> void applyOptimizer(Region<T>& x, const T* g, const SgdStep& sgd);
  // InvalidArgumentError unless an async registration's payload holds `values` float32 and
  // `wide_values` float64 values: the parameters and r.slots optimizer slots (0, or what its
  // optimizer keeps) of each type.
  void checkInitial(int worker, const Registration& r, size_t values, size_t wide_values) const;
  // mutex_ held: worker 0's initial parameters and optimizer state (Note [optimizer state]) of
  // region `x`, of `n` elements.
  template <typename T> void initialize(Region<T>& x, const Registration& r, size_t n, std::vector<T> initial);
  // mutex_ held: the optimizer's slots, in kState's order.
  template <typename T> std::vector<std::vector<T> Region<T>::*> slots() const;
  template <typename T> void applySgd(Region<T>& x, const T* g, const SgdStep& sgd);  // mutex_ held
  // mutex_ held; each the update applied_ + 1.
  template <typename T> void applyAdam(Region<T>& x, const T* g, double lr);
  template <typename T> void applyAdagrad(Region<T>& x, const T* g, double lr);
  template <typename T> void applyRmsprop(Region<T>& x, const T* g, const SgdStep& sgd);
  template <typename T> void applyAdamax(Region<T>& x, const T* g, double lr);
  template <typename T> void applyAdadelta(Region<T>& x, const T* g, double lr);
  template <typename T> void applyNadam(Region<T>& x, const T* g, double lr);
  template <typename T> void applyRadam(Region<T>& x, const T* g, double lr);
  uint64_t slowestLive() const;             // mutex_ held
  std::string workersBehind(uint64_t step) const;  // mutex_ held: "worker 2 (step 4)"
  void checkFailed() const;                 // mutex_ held: rethrows failure_

  const std::string name_;
  const int workers_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Registration> config_;       // guarded by mutex_
  bool initialized_ = false;                 // async: parameters set from worker 0
  Region<double> wide_;                      // the float64 elements (Note [element types])
  Region<float> narrow_;                     // the float32 elements
  uint64_t applied_ = 0;                     // async: pushes applied so far
  // async: the optimizer's step count when this server took over (worker 0's registration):
  // Adam's and Adagrad's step is step_base_ + applied_.
  uint64_t step_base_ = 0;
  double nadam_product_ = 1;                 // async, NAdam: P_t of the steps applied so far
  uint64_t round_ = 1;                       // sync: the round being summed
  int arrived_ = 0;                          // sync: pushes of round_ so far
  std::vector<uint64_t> steps_;              // by worker: pushes applied (async) or summed (sync)
  std::vector<bool> left_, died_;
  std::optional<Error> failure_;             // sync: a worker died; every later push fails
};

}  // namespace hora::ps
