// hora::torch: data-parallel training for libtorch programs in C++ (library hora_torch, CMake
// target hora::torch). The same five steps as hora.torch in Python:
//
//   hora::torch::init();                                          // 1. join the job
//   torch::set_num_threads(cores / hora::torch::local_size());    // 2. share the host
//   auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
//       torch::optim::SGDOptions(0.01 * hora::torch::size()));    // 3. scale the learning rate
//   hora::torch::DistributedOptimizer optimizer(sgd, model->named_parameters());   // 4. wrap
//   hora::torch::broadcast_parameters(model->named_parameters(), 0);              // 5. start
//   hora::torch::broadcast_optimizer_state(*sgd, 0);                              //    equal
//   ... optimizer.zero_grad(); loss.backward(); optimizer.step(); ...
//
// Names follow horovod.torch (snake_case, like libtorch's own API), so a Python script ports line
// by line. Every collective goes through the process's hora::Engine: it is named, negotiated
// among the ranks, fused with others and run on the engine thread; ranks may issue the same
// names in different orders. Tensors are CPU tensors of uint8, int8, int16, int32, int64,
// float16, bfloat16, float32, float64 or bool, for every collective (bool reduces as logical or
// and and, and refuses Average and scale factors); anything else throws
// hora::InvalidArgumentError naming the operation. Failures are the core's typed errors (hora/errors.h): MismatchError when ranks
// disagree on a tensor, PeerError when a rank died, TimeoutError, ShutdownError.
//
// Thread safety: collectives may be issued from any thread; init/shutdown from one.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hora/engine.h"
#include "hora/errors.h"
#include "hora/ps.h"
#include "hora/types.h"

namespace hora::torch {

// --- the job ------------------------------------------------------------------------------------

// Joins the job described by the environment (horarun, mpirun, srun, or none: a job of one).
// Idempotent.
void init();
// Leaves the job after agreeing with the other ranks; pending collectives fail with
// ShutdownError. init() may be called again afterwards. A program that returns from main or
// calls exit() without it leaves the same way, from an atexit handler init() registered.
void shutdown();
bool is_initialized();

// InvalidArgumentError before init().
int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();
// The engine, for what this header does not wrap (stats, timeline options).
hora::Engine& engine();

// --- collectives ----------------------------------------------------------------------------------

// What every collective may be told. An empty name is replaced by "<op>.noname.<n>", numbered per
// operation in the order of the calls (so unnamed calls must be issued in the same order on
// every rank).
struct CollectiveOptions {
  std::string name;
  int process_set = 0;  // 0: every rank; otherwise an id from add_process_set
};

struct ReduceOptions {
  std::string name;
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;   // inputs are multiplied by this before the reduction
  double postscale_factor = 1.0;  // the result is multiplied by this (by this / n for Average)
  int process_set = 0;
};

// A collective in flight. wait() returns its result (or throws its error); the tensors it reads
// and writes are kept alive until it completes.
class TensorHandle {
 public:
  TensorHandle() = default;
  bool poll() const;  // true once the collective completed, successfully or not
  at::Tensor wait() const;

  struct State;
  explicit TensorHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// The reduction over the ranks of `tensor`, in a new tensor.
TensorHandle allreduce_async(const at::Tensor& tensor, const ReduceOptions& options = {});
at::Tensor allreduce(const at::Tensor& tensor, const ReduceOptions& options = {});
// In place: `tensor` (contiguous) receives the reduction; wait() returns it.
TensorHandle allreduce_async_(at::Tensor& tensor, const ReduceOptions& options = {});
at::Tensor& allreduce_(at::Tensor& tensor, const ReduceOptions& options = {});

// The concatenation along dimension 0 of every rank's `tensor` (dimension 0 may differ between
// ranks; the others must agree), in rank order.
TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options = {});
at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options = {});

// root_rank's `tensor` on every rank.
TensorHandle broadcast_async(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
TensorHandle broadcast_async_(at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});
at::Tensor& broadcast_(at::Tensor& tensor, int root_rank, const CollectiveOptions& options = {});

// Rank r sends rows splits[d] of dimension 0 (an even split when empty) to each rank d and
// receives what every rank sends it, concatenated in rank order.
TensorHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                            const CollectiveOptions& options = {});
at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits = {},
                    const CollectiveOptions& options = {});

// The reduction over ranks, of which each rank keeps its block of dimension 0 (split as evenly
// as possible, earlier ranks taking the remainder).
TensorHandle reducescatter_async(const at::Tensor& tensor, const ReduceOptions& options = {});
at::Tensor reducescatter(const at::Tensor& tensor, const ReduceOptions& options = {});

// Horovod's join: this rank has no more batches; until every rank has joined, the others'
// allreduces go on with zeros in its place. Returns the rank that joined last.
int join(int process_set = 0);
void barrier(int process_set = 0);

// Process sets: called by every rank with the same ascending global ranks; returns the set's id.
int add_process_set(std::vector<int> ranks);
void remove_process_set(int process_set);

void start_timeline(const std::string& path, bool mark_cycles = false);
void stop_timeline();

// --- training helpers -----------------------------------------------------------------------------

// Overwrites every tensor of `params` (module->named_parameters(), or named_buffers()) with
// root_rank's values, in place.
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& params, int root_rank,
                          int process_set = 0);
// Makes `optimizer`'s state (momentum buffers, Adam moments and step counts) and its param
// groups' options (learning rate, momentum, ...) equal to root_rank's on every rank, including
// when root_rank's state is still empty. The parameters must be in the same order everywhere.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, int process_set = 0);
// The average over ranks of each value (e.g. validation loss and accuracy of each rank's shard).
std::vector<double> average_metrics(const std::vector<double>& values, const std::string& name,
                                    int process_set = 0);

enum class Compression {
  kNone,
  kFP16,  // floating-point gradients travel as float16 and are restored to their type after
};

// How gradients travel (hora.torch's mode="allreduce" | "ps-sync" | "ps-async"). The ps modes go
// through the job's parameter servers (horarun --servers K; docs/parameter_servers.md):
//   kPsSync:  the servers sum every worker's gradients; each worker gets the mean (kAverage) or
//             the sum (kSum) in .grad(), allreduce's result, and the wrapped optimizer steps.
//   kPsAsync: the servers apply each worker's gradients at once with the wrapped
//             torch::optim::SGD or Adam (its options; lr and momentum as they are at each
//             step) and the worker takes their parameters; the wrapped optimizer's own step
//             does not run.
enum class Exchange { kAllreduce, kPsSync, kPsAsync };

struct DistributedOptimizerOptions {
  // Gradients are accumulated locally over this many backward passes before one allreduce.
  int backward_passes_per_step = 1;
  Compression compression = Compression::kNone;  // the ps modes: kFP16 halves the bytes on the wire
  ReduceOp op = ReduceOp::kAverage;  // kAverage or kSum (no Adasum optimizer here: hora.torch has it)
  // Average only: inputs are divided by this before the sum and the result multiplied by it
  // after the average (less overflow with fp16). 1 in the ps modes.
  double gradient_predivide_factor = 1.0;
  int process_set = 0;  // 0 in the ps modes
  Exchange mode = Exchange::kAllreduce;
  // kPsAsync: no worker runs more than this many steps ahead of the slowest; -1 = unbounded.
  int64_t max_staleness = -1;
};

// Wraps any torch::optim::Optimizer so that step() applies gradients averaged over the ranks.
//
// A post-hook on each parameter's gradient accumulator enqueues that gradient's allreduce as soon
// as autograd has produced it, so the engine reduces (and fuses) late layers' gradients while
// early layers still compute theirs; step() waits for the rest, writes the averages into the
// .grad() fields and runs the wrapped optimizer's step. Parameters that got no gradient in a pass
// are reduced (as zeros) at step(), so every rank issues the same names.
//
// In the ps modes the hooks hand each gradient to the parameter servers' client, whose pushes go
// out while the backward pass goes on; step() pushes the rest (missing ones as zeros, sparse ones
// made dense) and takes in the servers' answer. The parameters must be float32 CPU tensors (made
// contiguous here); a job without servers is InvalidArgumentError.
class DistributedOptimizer {
 public:
  // named_parameters: module->named_parameters(); every parameter of `optimizer` must be among
  // them (the names identify the gradients across ranks).
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();  // removes the hooks; in the ps modes, says goodbye to the servers
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // synchronize() (unless skipped, see below), then the wrapped optimizer's step. The ps modes
  // run a closure before the push; kPsAsync does not step the wrapped optimizer.
  at::Tensor step(::torch::optim::Optimizer::LossClosure closure = nullptr);
  // Waits for every gradient's allreduce and writes the results into the .grad() fields (ps modes:
  // pushes the gradients and writes the answer into .grad(), or kPsAsync into the parameters); call
  // it before step() to look at or clip the averaged gradients, then step() does not reduce again.
  void synchronize();
  // InvalidArgumentError while gradients are in flight (after backward, before step).
  void zero_grad();

  ::torch::optim::Optimizer& optimizer() { return *optimizer_; }
  std::vector<::torch::optim::OptimizerParamGroup>& param_groups() { return optimizer_->param_groups(); }
  // ps modes: what the servers said about the last push (zeros before the first).
  const PsStep& parameter_server_step() const { return ps_step_; }
  // kPsAsync, between steps: the servers hold the optimizer's state (SGD's momentum buffers,
  // Adam's moments and step, ...); this writes it into the wrapped optimizer's own state, under
  // libtorch's names, so that torch::save(optimizer) holds it. An optimizer that holds state when
  // it is wrapped (loaded from such a checkpoint) registers it as the servers' starting point, so
  // load the checkpoint before making the DistributedOptimizer. InvalidArgumentError in the other
  // modes.
  void pullServerState();

  struct Hook;  // the autograd post-hook (src/torch/training.cc)

 private:
  struct Parameter {
    std::string name;       // "allreduce.<name>"
    at::Tensor tensor;
    std::shared_ptr<::torch::autograd::Node> accumulator;  // kept alive: it holds our hook
    uintptr_t hook_key = 0;
    int passes_left = 0;    // backward passes until the allreduce starts
    bool in_flight = false;
    TensorHandle handle;
    at::Tensor wire;        // what travels: the gradient, or its float16 copy
    int64_t elements = 0;   // ps modes: its size and dtype, as registered with the servers
    at::ScalarType dtype = at::kFloat;
    // ps modes, float16 and bfloat16 parameters: the servers hold float32 (Note [half-precision
    // parameters] in python/hora/torch/ps_optimizer.py).
    at::Tensor wide_grad;   // the gradient's float32 copy, pushed (ps-sync: also the answer)
    at::Tensor master;      // kPsAsync: the servers' parameters, rounded into `tensor` after each step
    bool widened = false;   // wide_grad holds this step's gradient (the hook copied it)
  };

  void onGradient(size_t index);  // called by the hook of parameter `index`
  void startAllreduce(Parameter& p);
  void connectToServers(PsOptions options);  // the ps modes' part of the constructor
  std::vector<at::Tensor> tensors() const;            // the parameters, in params_' order
  void pushToServers();       // the ps modes' synchronize(), under mutex_
  void roundIntoModel();      // the servers' float32 answer into float16 and bfloat16 parameters
  void readyForServers(size_t index);  // the ps modes' hook, under mutex_

  std::shared_ptr<::torch::optim::Optimizer> optimizer_;
  DistributedOptimizerOptions options_;
  std::mutex mutex_;  // hooks may run on autograd's threads
  std::vector<Parameter> params_;
  bool synchronized_ = false;
  std::unique_ptr<ParameterServerClient> servers_;  // the ps modes only
  PsOptions server_options_;                          // the ps modes: as registered
  bool step_begun_ = false;  // the ps modes: a hook readied a gradient of this step
  PsStep ps_step_;
};

}  // namespace hora::torch
