// Parameter servers: a worker's side (docs/parameter_servers.md).
//
// A ParameterServerClient connects one worker to every parameter server of the job and, once per
// step, pushes its gradients and pulls what the servers answer:
//   - kSync: the sum (or the mean) of every worker's gradients of this step, as an allreduce;
//   - kAsync: the servers' parameters after applying this worker's gradients with the optimizer
//     they hold (SGD with momentum, Adam, Adagrad, RMSprop, Adamax or Adadelta; lr and momentum
//     from the options, or as setSgd changed them); with max_staleness = s the answer waits until no live worker is more
//     than s steps behind this one.
// Tensors are float32 or float64 (PsOptions::dtypes), registered once (their element counts, in
// the same order on every worker); each server holds a shard of them (src/ps/sharding.h) and
// sums and applies each element in its tensor's type. Buffers are passed as untyped pointers,
// each to its tensor's type.
//
// Errors: PeerError naming the server when one dies or answers with an error (a worker that died
// in a sync job), TimeoutError when an answer does not come within options.timeout (naming the
// worker the server waits for), MismatchError when the workers registered different tensors or
// options. One thread drives a client (ready() may come from another thread, as a backward
// pass's hooks do, but not during step()); it runs a thread per server for the pushes. Move-only;
// the destructor says goodbye.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hora/export.h"
#include "hora/options.h"

namespace hora {

enum class PsMode { kSync, kAsync };
// kAsync: the optimizer the servers apply the pushes with.
enum class PsOptimizer { kSgd, kAdam, kAdagrad, kRmsprop, kAdamax, kAdadelta, kNadam, kRadam };
// A registered tensor's element type: the servers hold, sum and apply it in that type.
enum class PsDtype : uint8_t { kFloat32 = 0, kFloat64 = 1 };

struct PsOptions {
  PsMode mode = PsMode::kSync;
  bool average = true;          // kSync: the mean rather than the sum
  // The pushes (and kSync's replies) travel as float16, half the bytes (Compression.fp16); the
  // servers sum and apply in float32, and kAsync's replies, the parameters, stay float32.
  // float32 tensors only: InvalidArgumentError naming a float64 one (float16 would keep 11 of its
  // 53 bits, which whoever chose float64 did not ask for).
  bool fp16 = false;
  // By tensor, in registration order; empty: every tensor is float32.
  std::vector<PsDtype> dtypes;
  int64_t max_staleness = -1;   // kAsync: -1 = unbounded
  PsOptimizer optimizer = PsOptimizer::kSgd;  // kAsync
  double lr = 0.0;              // kAsync (setSgd changes lr and momentum between steps)
  double momentum = 0.0;        // kSgd, kRmsprop
  double beta1 = 0.9, beta2 = 0.999;  // kAdam, kAdamax, kNadam, kRadam
  double epsilon = 1e-8;        // every optimizer but kSgd
  double rho = 0.99;            // kRmsprop, kAdadelta: the mean square's decay (torch's alpha, Keras' rho)
  bool centered = false;        // kRmsprop: divide by the gradients' estimated variance
  double lr_decay = 0.0;        // kAdagrad: lr / (1 + (t - 1) lr_decay) at the servers' step t
  double initial_accumulator_value = 0.0;  // kAdagrad
  // kNadam: the momentum at step t is beta1 (1 - 0.96^(t momentum_decay) / 2) (torch's
  // momentum_decay; Keras' Nadam has 1). nadam_torch1_form: torch < 2.0's update, whose product
  // of momenta for step t + 1 counts step t's twice (a bug torch 2.0 fixed).
  double momentum_decay = 0.004;
  bool nadam_torch1_form = false;
  // kAsync, every optimizer: weight decay added to the gradient, g + wd p (torch's weight_decay of
  // SGD, Adam, Adagrad, RMSprop), or with decoupled_weight_decay taken from the parameters before
  // the update, p -= lr wd p (torch's AdamW, Keras' weight_decay of every optimizer).
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  // kAsync: Keras' form of the update instead of torch's: SGD with momentum v = m v - lr g;
  // p += v (torch: v = m v + g; p -= lr v, the same while lr is constant), Adam with epsilon
  // added to sqrt(v) before the bias correction (Keras' epsilon hat), Adagrad and RMSprop with
  // epsilon inside the square root, and RMSprop's momentum buffer holding lr times the step.
  bool keras_form = false;
};

// kAsync's optimizer state, which the servers hold (a checkpoint or an elastic commit wants it,
// or a restored job starts the optimizer from zero): each of the registered optimizer's slots,
// one buffer per tensor, and its step count (torch's `step`, which Adam's and Adamax's bias
// correction and Adagrad's lr decay use).
struct PsOptimizerState {
  uint64_t step = 0;
  std::vector<std::vector<void*>> slots;  // by slot, then by tensor (each of its tensor's dtype)
};

// How many slots kAsync's optimizer keeps per element, in the order PsOptimizerState has them:
// SGD 1 (the velocity); Adam 2 (the first and second moments); Adagrad 1 (the sum of squared
// gradients); RMSprop 2 (the momentum buffer, the mean square), 3 when centered (then the mean
// gradient); Adamax 2 (the first moment, the infinity norm); Adadelta 2 (the mean squares of the
// gradient and of the update); NAdam and RAdam 2 (the first and second moments). 0 in kSync,
// where the workers' optimizer holds the state.
HORA_API int psOptimizerSlots(const PsOptions& options);

// ps-async with N workers acts as momentum of about 1 - 1/N by itself (docs/parameter_servers.md,
// "ps-async and momentum: why 8 workers collapsed"), so an explicit momentum of 0.9 or more with
// 4 workers or more compounds it towards divergence. The warning the frontends give then, or ""
// (they give it once, from worker 0).
HORA_API std::string asyncMomentumWarning(int workers, double momentum);

// Where the job's servers are: horarun sets these through the environment (fromEnvironment).
struct PsJob {
  int worker = 0;   // this worker's number, 0 .. workers-1 (its rank)
  int workers = 1;
  int servers = 0;  // HORA_PS_SERVERS
  std::string hostname;
  RendezvousOptions rendezvous;  // the job's store
  CommunicatorOptions options;   // timeout (every wait), transport choice, chunk size
  // HORA_PS_COMPENSATE_MOMENTUM: ps-async's servers apply SGD's and RMSprop's momentum m (and
  // Adam's and Adamax's beta1) as max(0, m - (1 - 1/workers)), taking away what asynchrony adds
  // by itself.
  bool compensate_momentum = false;

  // From HORA_RANK, HORA_SIZE, HORA_PS_SERVERS, HORA_PS_COMPENSATE_MOMENTUM, HORA_HOSTNAME and the
  // rendezvous variables.
  static HORA_API PsJob fromEnvironment();
  // This job as generation `generation` of an elastic job has it: this worker is rank `rank` of
  // `size` there, and the generation's own servers keep their keys under its store prefix
  // (docs/parameter_servers.md, "Servers in an elastic job").
  HORA_API PsJob inGeneration(int generation, int rank, int size) const;
};

// After a step: this worker's steps the servers have applied, and the fewest any live worker has
// had applied (over all servers), for the staleness bound.
struct PsStep {
  uint64_t step = 0;
  uint64_t slowest = 0;
  // Async: where this push stands in the order the servers applied pushes (1 = first); with
  // several servers, the first server's (each applies in arrival order). Sync: the step.
  uint64_t version = 0;
};

class HORA_API ParameterServerClient {
 public:
  // Connects to every server and registers the tensors. `initial` (kAsync; one pointer per
  // tensor) is this worker's parameters: worker 0's become the servers' starting point, and so
  // does its `initial_state` (kAsync, read; null: the optimizer starts from zero). Returns with
  // `initial` overwritten by the servers' parameters in kAsync.
  ParameterServerClient(const PsJob& job, const std::vector<size_t>& tensor_elements, const PsOptions& options,
                        const std::vector<void*>& initial = {}, const PsOptimizerState* initial_state = nullptr);
  ~ParameterServerClient();
  ParameterServerClient(ParameterServerClient&&) noexcept;
  ParameterServerClient& operator=(ParameterServerClient&&) noexcept;

  // Tensor `tensor`'s gradient of the next step is final at `gradient` (read until step()
  // returns): its push may begin while the backward pass computes the rest (a frontend's hook
  // calls it). Optional; InvalidArgumentError for a tensor readied twice in one step. Does
  // nothing after a failure or close(): step() reports it.
  void ready(size_t tensor, const void* gradient);
  // Pushes `gradients` (one pointer per tensor, read; those readied already are taken from
  // there) and writes the answer into `outputs` (kSync: the reduced gradients, which may be
  // `gradients` themselves; kAsync: the parameters), once every gradient has been read.
  PsStep step(const std::vector<const void*>& gradients, const std::vector<void*>& outputs);
  // kAsync: the learning rate (and SGD's or RMSprop's momentum) the servers apply this worker's
  // next pushes with (options.lr and momentum until called): for a schedule, a warm-up or a callback that
  // changes them between steps. Ignored in kSync.
  void setSgd(double lr, double momentum);

  // kAsync, between steps: the servers' optimizer state now, written into `slots` (by slot, then
  // by tensor, as PsOptimizerState); returns its step count. A server's state is copied at
  // once, while the other workers' pushes go on.
  uint64_t pullOptimizerState(const std::vector<std::vector<void*>>& slots);
  // kNadam: the product of momenta after `step` of the servers' steps, with the beta1 the servers
  // apply (HORA_PS_COMPENSATE_MOMENTUM lowers it): what the optimizer's own state holds there.
  double nadamMomentumProduct(uint64_t step) const;

  // Says goodbye to every server; later calls fail with ShutdownError. Idempotent.
  void close();

  int servers() const;
  int optimizerSlots() const;  // psOptimizerSlots of the options registered

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hora
