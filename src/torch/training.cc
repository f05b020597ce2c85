// hora::torch's training helpers: starting every rank from the same state, averaging metrics,
// and the DistributedOptimizer (by allreduce, or through the parameter servers: include/hora/ps.h).
#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "hora/elastic.h"
#include "hora/torch.h"
#include "server_state.h"

namespace hora::torch {

namespace {

// This rank's number within a process set (the numbering root_rank uses).
int rankInSet(int process_set) {
  if (process_set == 0) return rank();
  std::vector<int> ranks = engine().processSetRanks(process_set);
  auto it = std::find(ranks.begin(), ranks.end(), rank());
  if (it == ranks.end()) {
    throw InvalidArgumentError("rank " + std::to_string(rank()) + " is not in process set " +
                               std::to_string(process_set));
  }
  return static_cast<int>(it - ranks.begin());
}

// root's bytes on every rank: their length, then the bytes.
std::string broadcastBytes(const std::string& bytes, int root_rank, const std::string& name, int process_set) {
  bool root = rankInSet(process_set) == root_rank;
  at::Tensor length = at::tensor({static_cast<int64_t>(root ? bytes.size() : 0)}, at::kLong);
  broadcast_(length, root_rank, {name + ".length", process_set});
  at::Tensor payload = at::empty({length.item<int64_t>()}, at::kByte);
  if (root) std::copy(bytes.begin(), bytes.end(), static_cast<char*>(payload.data_ptr()));
  broadcast_(payload, root_rank, {name + ".data", process_set});
  return std::string(static_cast<const char*>(payload.data_ptr()), payload.numel());
}

std::string groupOptionsKey(size_t group) { return "hora/param_group_options/" + std::to_string(group); }

const char* nameOf(Exchange mode) {
  switch (mode) {
    case Exchange::kAllreduce: return "Exchange::kAllreduce";
    case Exchange::kPsSync: return "Exchange::kPsSync";
    case Exchange::kPsAsync: return "Exchange::kPsAsync";
  }
  return "Exchange(?)";
}

// What the ps modes cannot do (yet), as hora.torch's ps_optimizer refuses it.
void checkParameterServerOptions(const DistributedOptimizerOptions& o) {
  if (o.max_staleness < -1) {
    throw InvalidArgumentError("DistributedOptimizer: max_staleness must be -1 (unbounded) or >= 0, got " +
                               std::to_string(o.max_staleness));
  }
  if (o.max_staleness != -1 && o.mode != Exchange::kPsAsync) {
    throw InvalidArgumentError("DistributedOptimizer: max_staleness (" + std::to_string(o.max_staleness) +
                               ") bounds mode Exchange::kPsAsync only; mode is " + nameOf(o.mode));
  }
  if (o.mode == Exchange::kAllreduce) return;
  const std::string mode = std::string("DistributedOptimizer: mode ") + nameOf(o.mode);
  if (o.process_set != 0) {
    throw InvalidArgumentError(mode + " takes no process_set (every rank is a worker), got " +
                               std::to_string(o.process_set));
  }
  if (o.gradient_predivide_factor != 1.0) {
    throw InvalidArgumentError(mode + " takes no gradient_predivide_factor, got " +
                               c10::str(o.gradient_predivide_factor));
  }
}

// kPsAsync: why `optimizer` cannot run on the servers, naming the param group and its value.
[[noreturn]] void refuseServerOption(const std::string& why, size_t group, const std::string& has) {
  throw InvalidArgumentError("DistributedOptimizer: mode Exchange::kPsAsync: " + why + " (param group " +
                             std::to_string(group) + " has " + has + ")");
}

// Every group's weight decay, which the servers apply to the whole shard: one value for all.
void readWeightDecay(double weight_decay, size_t group, PsOptions& into) {
  if (group > 0 && weight_decay != into.weight_decay) {
    refuseServerOption("every param group must have the same weight_decay", group,
                       c10::str(weight_decay) + "; group 0 " + c10::str(into.weight_decay));
  }
  into.weight_decay = weight_decay;
}

template <typename OptionsT>
const OptionsT& groupOptions(::torch::optim::Optimizer& optimizer, size_t group) {
  return static_cast<const OptionsT&>(optimizer.param_groups()[group].options());
}

void readSgd(::torch::optim::Optimizer& optimizer, PsOptions& into) {
  into.optimizer = PsOptimizer::kSgd;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& o = groupOptions<::torch::optim::SGDOptions>(optimizer, g);
    if (o.dampening() != 0)
      refuseServerOption("the servers' SGD has no dampening; set it to 0", g, c10::str(o.dampening()));
    readWeightDecay(o.weight_decay(), g, into);
    if (o.nesterov()) refuseServerOption("the servers' SGD has no nesterov; set it to false", g, "true");
    if (g > 0 && (o.lr() != into.lr || o.momentum() != into.momentum)) {
      refuseServerOption("every param group must have the same lr and momentum", g,
                         "lr " + c10::str(o.lr()) + ", momentum " + c10::str(o.momentum()) + "; group 0 lr " +
                             c10::str(into.lr) + ", momentum " + c10::str(into.momentum));
    }
    into.lr = o.lr();
    into.momentum = o.momentum();
  }
}

// Adam's weight decay is added to the gradient, AdamW's decoupled from it (OptionsT says which).
template <typename OptionsT>
void readAdam(::torch::optim::Optimizer& optimizer, PsOptions& into) {
  into.optimizer = PsOptimizer::kAdam;
  into.momentum = 0.0;
  into.decoupled_weight_decay = std::is_same_v<OptionsT, ::torch::optim::AdamWOptions>;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& o = groupOptions<OptionsT>(optimizer, g);
    readWeightDecay(o.weight_decay(), g, into);
    if (o.amsgrad())
      refuseServerOption(std::string("the servers' ") + (into.decoupled_weight_decay ? "AdamW" : "Adam") +
                             " has no amsgrad; set it to false",
                         g, "true");
    const auto [beta1, beta2] = o.betas();
    if (g > 0 && (o.lr() != into.lr || beta1 != into.beta1 || beta2 != into.beta2 || o.eps() != into.epsilon)) {
      refuseServerOption("every param group must have the same lr, betas and eps", g,
                         "lr " + c10::str(o.lr()) + "; group 0 lr " + c10::str(into.lr));
    }
    into.lr = o.lr();
    into.beta1 = beta1;
    into.beta2 = beta2;
    into.epsilon = o.eps();
  }
}

void readAdagrad(::torch::optim::Optimizer& optimizer, PsOptions& into) {
  into.optimizer = PsOptimizer::kAdagrad;
  into.momentum = 0.0;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& o = groupOptions<::torch::optim::AdagradOptions>(optimizer, g);
    readWeightDecay(o.weight_decay(), g, into);
    if (g > 0 && (o.lr() != into.lr || o.lr_decay() != into.lr_decay || o.eps() != into.epsilon ||
                  o.initial_accumulator_value() != into.initial_accumulator_value)) {
      refuseServerOption("every param group must have the same lr, lr_decay, eps and initial_accumulator_value", g,
                         "lr " + c10::str(o.lr()) + ", lr_decay " + c10::str(o.lr_decay()) + "; group 0 lr " +
                             c10::str(into.lr) + ", lr_decay " + c10::str(into.lr_decay));
    }
    into.lr = o.lr();
    into.lr_decay = o.lr_decay();
    into.epsilon = o.eps();
    into.initial_accumulator_value = o.initial_accumulator_value();
  }
}

void readRmsprop(::torch::optim::Optimizer& optimizer, PsOptions& into) {
  into.optimizer = PsOptimizer::kRmsprop;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& o = groupOptions<::torch::optim::RMSpropOptions>(optimizer, g);
    readWeightDecay(o.weight_decay(), g, into);
    if (g > 0 && (o.lr() != into.lr || o.alpha() != into.rho || o.eps() != into.epsilon ||
                  o.momentum() != into.momentum || o.centered() != into.centered)) {
      refuseServerOption("every param group must have the same lr, alpha, eps, momentum and centered", g,
                         "lr " + c10::str(o.lr()) + ", momentum " + c10::str(o.momentum()) + "; group 0 lr " +
                             c10::str(into.lr) + ", momentum " + c10::str(into.momentum));
    }
    into.lr = o.lr();
    into.rho = o.alpha();  // the decay of the mean square, rho on the servers
    into.epsilon = o.eps();
    into.momentum = o.momentum();
    into.centered = o.centered();
  }
}

// kPsAsync: what the servers run, which must be `optimizer` itself: a torch::optim::SGD, Adam,
// AdamW, Adagrad or RMSprop whose param groups agree, without the options the servers lack. `into` keeps
// mode, average and max_staleness; its optimizer fields are set.
void readServerOptimizer(::torch::optim::Optimizer& optimizer, PsOptions& into) {
  if (dynamic_cast<::torch::optim::SGD*>(&optimizer)) return readSgd(optimizer, into);
  if (dynamic_cast<::torch::optim::Adam*>(&optimizer)) return readAdam<::torch::optim::AdamOptions>(optimizer, into);
  if (dynamic_cast<::torch::optim::AdamW*>(&optimizer)) return readAdam<::torch::optim::AdamWOptions>(optimizer, into);
  if (dynamic_cast<::torch::optim::Adagrad*>(&optimizer)) return readAdagrad(optimizer, into);
  if (dynamic_cast<::torch::optim::RMSprop*>(&optimizer)) return readRmsprop(optimizer, into);
  throw InvalidArgumentError("DistributedOptimizer: mode Exchange::kPsAsync: the servers run SGD, Adam, AdamW, "
                             "Adagrad or RMSprop: wrap a torch::optim::SGD, Adam, AdamW, Adagrad or RMSprop");
}

// kPsAsync: the warning of asyncMomentumWarning (include/hora/ps.h), on rank 0, once per process:
// a log line, as hora's own look, since hora::torch has no logger of its own.
void warnOfAsyncMomentum(double momentum) {
  static std::atomic<bool> warned{false};
  if (warned.load() || rank() != 0) return;
  const std::string warning = asyncMomentumWarning(size(), momentum);
  if (warning.empty() || warned.exchange(true)) return;
  std::cerr << "[hora W rank 0] " << warning << std::endl;
}

}  // namespace

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& params, int root_rank,
                          int process_set) {
  ::torch::NoGradGuard no_grad;  // writing into parameters is not part of any graph
  std::vector<TensorHandle> handles;
  handles.reserve(params.size());
  for (const auto& item : params) {
    at::Tensor tensor = item.value();
    if (!tensor.defined()) continue;
    handles.push_back(broadcast_async_(tensor, root_rank, {"broadcast." + item.key(), process_set}));
  }
  for (const TensorHandle& h : handles) h.wait();
}

// The state travels as libtorch's own serialization of the optimizer (every optimizer class
// knows how to save and load its state, keyed by parameter position), plus each param group's
// options, which Optimizer::load leaves alone.
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root_rank, int process_set) {
  bool root = rankInSet(process_set) == root_rank;
  std::string bytes;
  if (root) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      ::torch::serialize::OutputArchive options(archive.compilation_unit());
      optimizer.param_groups()[g].options().serialize(options);
      archive.write(groupOptionsKey(g), options);
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = broadcastBytes(bytes, root_rank, "broadcast_optimizer_state", process_set);
  if (root) return;
  try {
    ::torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    optimizer.state().clear();  // root's state may still be empty
    optimizer.load(archive);
    for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
      ::torch::serialize::InputArchive options;
      archive.read(groupOptionsKey(g), options);
      optimizer.param_groups()[g].options().serialize(options);
    }
  } catch (const c10::Error& e) {
    throw InvalidArgumentError("broadcast_optimizer_state: rank " + std::to_string(root_rank) +
                               "'s optimizer state does not fit this rank's optimizer (another class, or other "
                               "parameters?): " + e.what_without_backtrace());
  }
}

std::vector<double> average_metrics(const std::vector<double>& values, const std::string& name, int process_set) {
  at::Tensor t = at::tensor(values, at::kDouble);
  ReduceOptions options;
  options.name = "average_metrics." + name;
  options.process_set = process_set;
  allreduce_(t, options);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

// --- DistributedOptimizer -------------------------------------------------------------------------

// Runs after autograd has accumulated a parameter's gradient for this backward pass.
struct DistributedOptimizer::Hook : ::torch::autograd::FunctionPostHook {
  Hook(DistributedOptimizer* o, size_t i) : owner(o), index(i) {}
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list&) override {
    owner->onGradient(index);
    return outputs;
  }
  DistributedOptimizer* owner;
  size_t index;
};

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                                           const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                                           DistributedOptimizerOptions options)
    : optimizer_(std::move(optimizer)), options_(options) {
  if (!optimizer_) throw InvalidArgumentError("DistributedOptimizer: the optimizer is null");
  checkParameterServerOptions(options_);
  if (options_.backward_passes_per_step < 1) {
    throw InvalidArgumentError("DistributedOptimizer: backward_passes_per_step must be at least 1, got " +
                               std::to_string(options_.backward_passes_per_step));
  }
  if (options_.op != ReduceOp::kAverage && options_.op != ReduceOp::kSum) {
    // Horovod's Adasum optimizer (reducing the deltas of local steps) is hora.torch's only.
    throw InvalidArgumentError("DistributedOptimizer: op must be Average or Sum (the Adasum optimizer is Python's; "
                               "hvd::allreduce takes ReduceOp::kAdasum)");
  }
  if (options_.gradient_predivide_factor != 1.0 && options_.op != ReduceOp::kAverage) {
    throw InvalidArgumentError("DistributedOptimizer: gradient_predivide_factor needs op Average");
  }
  PsOptions ps;
  ps.mode = options_.mode == Exchange::kPsAsync ? PsMode::kAsync : PsMode::kSync;
  ps.average = options_.op == ReduceOp::kAverage;
  ps.max_staleness = options_.max_staleness;
  ps.fp16 = options_.compression == Compression::kFP16;  // on the wire; the servers compute in float32
  if (options_.mode == Exchange::kPsAsync) {
    readServerOptimizer(*optimizer_, ps);
    warnOfAsyncMomentum(ps.momentum);
  }
  std::unordered_map<const void*, std::string> names;
  for (const auto& item : named_parameters) names[item.value().unsafeGetTensorImpl()] = item.key();
  for (const auto& group : optimizer_->param_groups()) {
    for (const at::Tensor& p : group.params()) {
      if (!p.requires_grad()) continue;
      auto name = names.find(p.unsafeGetTensorImpl());
      if (name == names.end()) {
        throw InvalidArgumentError(
            "DistributedOptimizer: a parameter of the optimizer (shape " + c10::str(p.sizes()) +
            ") is not among named_parameters; its gradient could not be matched across ranks");
      }
      Parameter param;
      param.name = "allreduce." + name->second;
      param.tensor = p;
      param.passes_left = options_.backward_passes_per_step;
      params_.push_back(std::move(param));
    }
  }
  if (options_.mode != Exchange::kAllreduce) {
    connectToServers(ps);
  } else {
    int set_size = options_.process_set == 0 ? size()
                                             : static_cast<int>(engine().processSetRanks(options_.process_set).size());
    if (set_size == 1) return;  // nothing to average: no hooks
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    if (!p.tensor.grad().defined()) p.tensor.mutable_grad() = at::zeros_like(p.tensor);
    p.accumulator = ::torch::autograd::impl::grad_accumulator(p.tensor);
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<Hook>(this, i));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  for (Parameter& p : params_) {
    if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
  }
}

void DistributedOptimizer::onGradient(size_t index) {
  std::lock_guard lock(mutex_);
  Parameter& p = params_[index];
  if (p.in_flight) {
    throw InvalidArgumentError("DistributedOptimizer: the gradient of " + p.name.substr(10) +
                               " was computed more than backward_passes_per_step (" +
                               std::to_string(options_.backward_passes_per_step) +
                               ") times before step(); raise backward_passes_per_step to accumulate locally");
  }
  synchronized_ = false;
  if (--p.passes_left > 0) return;
  if (servers_) {
    readyForServers(index);
  } else {
    startAllreduce(p);
  }
}

// The gradient's push may begin while the backward pass goes on (Note [overlapped pushes] in
// src/ps/client.cc); one that is not a dense contiguous tensor yet is pushed by step().
void DistributedOptimizer::readyForServers(size_t index) {
  Parameter& p = params_[index];
  p.in_flight = true;
  const at::Tensor& grad = p.tensor.grad();
  if (!grad.defined() || grad.is_sparse() || !grad.is_contiguous()) return;
  if (p.wide_grad.defined()) {
    ::torch::NoGradGuard no_grad;
    p.wide_grad.copy_(grad);
    p.widened = true;
  }
  if (!step_begun_ && options_.mode == Exchange::kPsAsync) {
    // Before the step's first push: its lr and momentum, as a scheduler left them.
    PsOptions now;
    readServerOptimizer(*optimizer_, now);
    servers_->setSgd(now.lr, now.momentum);
  }
  step_begun_ = true;
  servers_->ready(index, (p.wide_grad.defined() ? p.wide_grad : grad).data_ptr());
}

void DistributedOptimizer::startAllreduce(Parameter& p) {
  at::Tensor& grad = p.tensor.mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(p.tensor);  // not used in this pass
  bool fp16 = options_.compression == Compression::kFP16 && grad.is_floating_point() &&
              grad.scalar_type() != at::kHalf;
  p.wire = fp16 ? grad.to(at::kHalf) : grad;
  ReduceOptions reduce;
  reduce.name = p.name;
  reduce.op = options_.op;
  reduce.process_set = options_.process_set;
  if (options_.op == ReduceOp::kAverage) {
    // Average divides by the number of ranks after the sum; the predivide factor moves part of
    // that division before it.
    reduce.prescale_factor = 1.0 / options_.gradient_predivide_factor;
    reduce.postscale_factor = options_.gradient_predivide_factor;
  }
  p.handle = allreduce_async_(p.wire, reduce);
  p.in_flight = true;
}

// Float16 and bfloat16 parameters meet the servers' float32 through float32 copies, as in hora.torch
// (Note [half-precision parameters] in python/hora/torch/ps_optimizer.py): the gradient's
// (wide_grad) and, in kPsAsync, the parameter's (master, rounded into the model after each step).
// float64 ones go to the servers as they are, which hold them in float64 (PsOptions::dtypes).
void DistributedOptimizer::connectToServers(PsOptions options) {
  std::vector<size_t> elements;
  std::vector<void*> initial;  // kPsAsync: every worker starts from the servers' (worker 0's)
  for (Parameter& p : params_) {
    const at::ScalarType dtype = p.tensor.scalar_type();
    const bool served = dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16;
    if (!served || !p.tensor.device().is_cpu()) {
      throw InvalidArgumentError(std::string("DistributedOptimizer: mode ") + nameOf(options_.mode) +
                                 " takes float32, float64, float16 or bfloat16 CPU parameters; " + p.name.substr(10) +
                                 " is " + c10::toString(dtype) + " on " + p.tensor.device().str());
    }
    if (dtype == at::kDouble && options.fp16)
      throw InvalidArgumentError("DistributedOptimizer: Compression::kFP16 takes float32, float16 or bfloat16 "
                                 "parameters to the servers; " + p.name.substr(10) + " is float64");
    options.dtypes.push_back(dtype == at::kDouble ? PsDtype::kFloat64 : PsDtype::kFloat32);
    if (!p.tensor.is_contiguous()) p.tensor.set_data(p.tensor.detach().contiguous());
    p.elements = p.tensor.numel();
    p.dtype = dtype;
    elements.push_back(static_cast<size_t>(p.elements));
    if (dtype == at::kHalf || dtype == at::kBFloat16) {
      p.wide_grad = at::empty(p.tensor.sizes(), p.tensor.options().dtype(at::kFloat));
      if (options.mode == PsMode::kAsync) p.master = p.tensor.detach().to(at::kFloat);
    }
    if (options.mode == PsMode::kAsync)
      initial.push_back((p.master.defined() ? p.master : p.tensor).data_ptr());
  }
  server_options_ = options;
  std::optional<PsOptimizerState> state;  // kPsAsync: the optimizer's, loaded from a checkpoint
  if (options.mode == PsMode::kAsync && detail::hasState(*optimizer_, tensors()))
    state = detail::serverSlots(*optimizer_, tensors(), options).pointers();
  // An elastic job's servers serve one generation: this one's, where this worker has its rank of
  // this generation's size (a re-formed job makes its DistributedOptimizer again after init()).
  PsJob job = PsJob::fromEnvironment();
  if (elastic::enabled()) {
    const Identity& me = engine().identity();
    job = job.inGeneration(me.generation, me.rank, me.size);
  }
  servers_ = std::make_unique<ParameterServerClient>(job, elements, options, initial, state ? &*state : nullptr);
  // kPsAsync: the registration wrote the servers' parameters into the masters.
  if (options.mode == PsMode::kAsync) roundIntoModel();
}

void DistributedOptimizer::roundIntoModel() {
  ::torch::NoGradGuard no_grad;
  for (Parameter& p : params_) {
    if (!p.wide_grad.defined()) continue;
    if (options_.mode == Exchange::kPsSync) {
      p.tensor.mutable_grad().copy_(p.wide_grad);
    } else {
      p.tensor.copy_(p.master);
    }
  }
}

std::vector<at::Tensor> DistributedOptimizer::tensors() const {
  std::vector<at::Tensor> out;
  for (const Parameter& p : params_) out.push_back(p.tensor);
  return out;
}

void DistributedOptimizer::pullServerState() {
  std::lock_guard lock(mutex_);
  if (options_.mode != Exchange::kPsAsync)
    throw InvalidArgumentError(std::string("DistributedOptimizer::pullServerState: mode ") + nameOf(options_.mode) +
                               " keeps the optimizer's state on the workers; only Exchange::kPsAsync's servers hold it");
  const detail::ServerSlots slots = detail::serverSlots(*optimizer_, tensors(), server_options_);
  const uint64_t step = servers_->pullOptimizerState(slots.pointers().slots);
  detail::setServerStep(*optimizer_, tensors(), step);
}

// The parameters' storage is read and written through raw pointers, so each must still be the
// contiguous tensor of the dtype and size registered with the servers.
void DistributedOptimizer::pushToServers() {
  std::vector<const void*> gradients;
  std::vector<void*> outputs;
  for (Parameter& p : params_) {
    if (!p.tensor.is_contiguous() || p.tensor.scalar_type() != p.dtype || p.tensor.numel() != p.elements) {
      throw InvalidArgumentError("DistributedOptimizer: " + p.name.substr(10) + " is no longer a contiguous " +
                                 c10::toString(p.dtype) + " tensor of " + std::to_string(p.elements) +
                                 " elements, as registered with the parameter servers");
    }
    at::Tensor& grad = p.tensor.mutable_grad();
    if (!grad.defined()) {
      grad = at::zeros_like(p.tensor);  // not used in this pass
    } else if (grad.is_sparse()) {
      grad = grad.to_dense();
    }
    if (!grad.is_contiguous()) grad = grad.contiguous();
    if (p.wide_grad.defined() && !p.widened) {
      ::torch::NoGradGuard no_grad;
      p.wide_grad.copy_(grad);
    }
    const at::Tensor& pushed = p.wide_grad.defined() ? p.wide_grad : grad;
    const at::Tensor& parameters = p.master.defined() ? p.master : p.tensor;
    gradients.push_back(pushed.data_ptr());
    outputs.push_back(options_.mode == Exchange::kPsSync ? pushed.data_ptr() : parameters.data_ptr());
  }
  // The servers apply this push with the optimizer's lr and momentum now, unless a hook began it:
  // a scheduler's changes reach them.
  if (options_.mode == Exchange::kPsAsync && !step_begun_) {
    PsOptions now;
    readServerOptimizer(*optimizer_, now);
    warnOfAsyncMomentum(now.momentum);  // a scheduler may have raised it
    servers_->setSgd(now.lr, now.momentum);
  }
  step_begun_ = false;
  for (Parameter& p : params_) {
    p.in_flight = false;
    p.widened = false;
    p.passes_left = options_.backward_passes_per_step;
  }
  ps_step_ = servers_->step(gradients, outputs);
  roundIntoModel();
}

void DistributedOptimizer::synchronize() {
  std::lock_guard lock(mutex_);
  if (servers_) {
    pushToServers();
    synchronized_ = true;
    return;
  }
  if (params_.empty() || !params_.front().accumulator) {  // a job of one: nothing to average
    synchronized_ = true;
    return;
  }
  // Gradients whose hooks did not run (unused parameters, or fewer backward passes than
  // backward_passes_per_step) are reduced now, so every rank issues the same names.
  for (Parameter& p : params_) {
    if (!p.in_flight) startAllreduce(p);
  }
  std::exception_ptr error;
  for (Parameter& p : params_) {
    try {
      at::Tensor reduced = p.handle.wait();
      at::Tensor& grad = p.tensor.mutable_grad();
      if (!reduced.is_same(grad)) {
        ::torch::NoGradGuard no_grad;
        grad.copy_(reduced);
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    p.in_flight = false;
    p.handle = TensorHandle();
    p.wire = at::Tensor();
    p.passes_left = options_.backward_passes_per_step;
  }
  if (error) std::rethrow_exception(error);
  synchronized_ = true;
}

at::Tensor DistributedOptimizer::step(::torch::optim::Optimizer::LossClosure closure) {
  if (servers_) {
    at::Tensor loss;
    if (closure) {  // before the push, as hora.torch: its gradients are the ones pushed
      at::AutoGradMode enable_grad(true);
      loss = closure();
      synchronized_ = false;
    }
    if (!synchronized_) synchronize();
    synchronized_ = false;
    if (options_.mode == Exchange::kPsSync) optimizer_->step();
    return loss;
  }
  if (!synchronized_) synchronize();
  synchronized_ = false;
  return optimizer_->step(std::move(closure));
}

void DistributedOptimizer::zero_grad() {
  {
    std::lock_guard lock(mutex_);
    for (const Parameter& p : params_) {
      if (p.in_flight) {
        throw InvalidArgumentError("DistributedOptimizer: zero_grad() was called after backward() but before "
                                   "step() or synchronize(), while the gradient of " + p.name.substr(10) +
                                   " is being averaged");
      }
    }
  }
  optimizer_->zero_grad();
}

}  // namespace hora::torch
