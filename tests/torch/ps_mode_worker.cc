// One worker of a job under horarun --servers K, training with hora::torch::DistributedOptimizer's
// parameter server modes; tests/python/test_parameter_servers.py runs it and checks what each
// worker writes (<out>/rank<r>.json) against numpy. Usage:
//
//   hora_torch_ps_worker <out> sync <average|sum> <steps>
//       a Linear(40, 30) trained by SGD (lr 0.1, momentum 0.9) on an MSE loss, first with
//       Exchange::kPsSync, then with allreduce; exits 1 when the two disagree.
//   hora_torch_ps_worker <out> async <max_staleness> <steps> [sgd|sgd_wd|adam|adamw|adagrad|rmsprop]
//       50 parameters, worker r's start r + 1, SGD on the servers with Exchange::kPsAsync (lr
//       0.05 / s at step s, momentum 0.5 and 0.25 after step 5; or Adam at that lr, betas 0.8 and
//       0.99, eps 1e-3; or Adagrad at that lr, lr_decay 0.1, eps 1e-3, initial accumulator 0.2;
//       or centered RMSprop at that lr, alpha 0.9, eps 1e-3, momentum 0.9 and 0.5 after step 5);
//       worker 1 is slow; logs each step's PsStep and parameters, and at the end the servers'
//       optimizer state (pullServerState()).
//   hora_torch_ps_worker <out> async64 <max_staleness> <steps> [...]
//       the same with float64 parameters and gradients, which the servers hold in float64.
//   hora_torch_ps_worker <out> half <ps-sync|ps-async> <bfloat16|float16>
//       test_parameter_servers.py's HALF script: SGD (lr 0.1) on 64 parameters of that dtype.
//
// The initial values and data are formulas (sines of an index) that numpy computes identically.
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hora/torch.h"

namespace hvd = hora::torch;

namespace {

// sin(a * i + b) for i = 0 .. n-1, computed in float64 and rounded to float32 (as numpy does).
at::Tensor sines(int64_t n, double a, double b) {
  return at::sin(at::arange(n, at::kDouble) * a + b).to(at::kFloat);
}

std::string json(const at::Tensor& t) {
  at::Tensor flat = t.detach().reshape({-1}).to(at::kDouble).contiguous();
  std::ostringstream out;
  out.precision(17);
  out << "[";
  for (int64_t i = 0; i < flat.numel(); ++i) out << (i ? "," : "") << flat.data_ptr<double>()[i];
  out << "]";
  return out.str();
}

// Trains the linear layer for `steps` steps in `mode`; returns {"weight": ..., "bias": ...}.
std::pair<at::Tensor, at::Tensor> trainLinear(hvd::Exchange mode, hora::ReduceOp op, int steps, std::string& log) {
  int r = hvd::rank();
  torch::nn::Linear model(40, 30);
  {
    torch::NoGradGuard no_grad;
    model->weight.copy_(sines(30 * 40, 0.37, 0.1).view({30, 40}));
    model->bias.copy_(sines(30, 0.7, 1.3));
  }
  at::Tensor x = sines(8 * 40, 0.13, r + 1.0).view({8, 40});
  at::Tensor y = sines(8 * 30, 0.29, 2.0 * r + 0.5).view({8, 30});
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  hvd::DistributedOptimizerOptions options;
  options.mode = mode;
  options.op = op;
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters(), options);
  for (int s = 0; s < steps; ++s) {
    optimizer.zero_grad();
    torch::nn::functional::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    if (mode == hvd::Exchange::kAllreduce) continue;
    if (s > 0) log += ",";
    log += std::to_string(optimizer.parameter_server_step().step);
  }
  return {model->weight.detach().clone(), model->bias.detach().clone()};
}

int runSync(const std::string& out, const std::string& op_name, int steps) {
  hora::ReduceOp op = op_name == "sum" ? hora::ReduceOp::kSum : hora::ReduceOp::kAverage;
  std::string ps_steps, unused;
  auto [ps_weight, ps_bias] = trainLinear(hvd::Exchange::kPsSync, op, steps, ps_steps);
  auto [weight, bias] = trainLinear(hvd::Exchange::kAllreduce, op, steps, unused);
  std::ofstream(out + "/rank" + std::to_string(hvd::rank()) + ".json")
      << "{\"ps-sync\": {\"weight\": " << json(ps_weight) << ", \"bias\": " << json(ps_bias) << "},"
      << " \"allreduce\": {\"weight\": " << json(weight) << ", \"bias\": " << json(bias) << "},"
      << " \"ps_steps\": [" << ps_steps << "]}\n";
  if (!at::allclose(ps_weight, weight, 1e-5, 1e-5) || !at::allclose(ps_bias, bias, 1e-5, 1e-5)) {
    std::cerr << "rank " << hvd::rank() << ": ps-sync and allreduce disagree\n";
    return 1;
  }
  return 0;
}

// The optimizer of the async runs (see the top), over `p`.
std::shared_ptr<torch::optim::Optimizer> asyncOptimizer(const std::string& kind, const at::Tensor& p) {
  const std::vector<at::Tensor> params{p};
  if (kind == "adam")
    return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.05).betas({0.8, 0.99}).eps(1e-3));
  if (kind == "adamw") {
    return std::make_shared<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(0.05).betas({0.8, 0.99}).eps(1e-3).weight_decay(0.3));
  }
  if (kind == "sgd_wd") {
    return std::make_shared<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.05).momentum(0.5).weight_decay(0.3));
  }
  if (kind == "adagrad") {
    return std::make_shared<torch::optim::Adagrad>(
        params, torch::optim::AdagradOptions(0.05).lr_decay(0.1).eps(1e-3).initial_accumulator_value(0.2));
  }
  if (kind == "rmsprop") {
    return std::make_shared<torch::optim::RMSprop>(
        params, torch::optim::RMSpropOptions(0.05).alpha(0.9).eps(1e-3).momentum(0.9).centered(true));
  }
  return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.5));
}

// As a scheduler would: lr 0.05 / s at step s, SGD's momentum lowered after step 5 (RMSprop's too).
void schedule(torch::optim::Optimizer& inner, const std::string& kind, int s) {
  auto& options = inner.param_groups()[0].options();
  options.set_lr(0.05 / s);
  if (kind == "sgd" || kind == "sgd_wd")
    static_cast<torch::optim::SGDOptions&>(options).momentum(s <= 5 ? 0.5 : 0.25);
  if (kind == "rmsprop") static_cast<torch::optim::RMSpropOptions&>(options).momentum(s <= 5 ? 0.9 : 0.5);
}

// The servers' optimizer state, as pullServerState() left it in `inner`'s own state of `p`:
// {"step": n, "slots": [...]}, the slots in the servers' order (include/hora/ps.h).
std::string serverStateJson(torch::optim::Optimizer& inner, const at::Tensor& p, const std::string& kind) {
  namespace optim = torch::optim;
  optim::OptimizerParamState& state = *inner.state().at(c10::guts::to_string(p.unsafeGetTensorImpl()));
  std::vector<at::Tensor> slots;
  int64_t step = 0;
  if (kind == "adam") {
    const auto& s = static_cast<optim::AdamParamState&>(state);
    slots = {s.exp_avg(), s.exp_avg_sq()};
    step = s.step();
  } else if (kind == "adamw") {
    const auto& s = static_cast<optim::AdamWParamState&>(state);
    slots = {s.exp_avg(), s.exp_avg_sq()};
    step = s.step();
  } else if (kind == "adagrad") {
    const auto& s = static_cast<optim::AdagradParamState&>(state);
    slots = {s.sum()};
    step = s.step();
  } else if (kind == "rmsprop") {
    const auto& s = static_cast<optim::RMSpropParamState&>(state);
    slots = {s.momentum_buffer(), s.square_avg(), s.grad_avg()};
    step = s.step();
  } else {
    slots = {static_cast<optim::SGDParamState&>(state).momentum_buffer()};
  }
  std::string out = "{\"step\": " + std::to_string(step) + ", \"slots\": [";
  for (size_t i = 0; i < slots.size(); ++i) out += (i ? ", " : "") + json(slots[i]);
  return out + "]}";
}

int runAsync(const std::string& out, int64_t max_staleness, int steps, const std::string& kind,
             at::ScalarType dtype) {
  int r = hvd::rank();
  at::Tensor p = at::full({50}, r + 1.0, dtype).requires_grad_(true);
  torch::OrderedDict<std::string, at::Tensor> named;
  named.insert("p", p);
  std::shared_ptr<torch::optim::Optimizer> inner = asyncOptimizer(kind, p);
  hvd::DistributedOptimizerOptions options;
  options.mode = hvd::Exchange::kPsAsync;
  options.max_staleness = max_staleness;
  hvd::DistributedOptimizer optimizer(inner, named, options);
  std::ostringstream log;
  log << "{\"start\": " << json(p) << ", \"log\": [";
  for (int s = 1; s <= steps; ++s) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the slow worker
    schedule(*inner, kind, s);  // the servers follow
    const at::Tensor g = at::arange(1, 51, dtype) * 0.01 * (r + 1) + 0.001 * s;
    if (s % 2) {  // through a backward pass: the hook pushes, with the lr and momentum set above
      optimizer.zero_grad();
      (p * g).sum().backward();
    } else {
      p.mutable_grad() = g;
    }
    optimizer.step();
    const hora::PsStep& st = optimizer.parameter_server_step();
    log << (s > 1 ? ", " : "") << "{\"step\": " << st.step << ", \"slowest\": " << st.slowest
        << ", \"version\": " << st.version << ", \"params\": " << json(p) << "}";
  }
  hvd::barrier();  // every push is applied: the servers' state is the replay's last
  optimizer.pullServerState();
  log << "], \"state\": " << serverStateJson(*inner, p, kind) << "}\n";
  std::ofstream(out + "/rank" + std::to_string(r) + ".json") << log.str();
  return 0;
}

// What test_parameter_servers.py's HALF script does, through hora::torch: 10 steps of gradients
// k x eps / 8 x (r + 1) (twice that at odd steps, through a backward pass), then after a barrier
// a push of zeros; writes each step's .grad() and the final parameters.
int runHalf(const std::string& out, const std::string& mode, const std::string& dtype_name) {
  const int r = hvd::rank();
  const at::ScalarType dtype = dtype_name == "bfloat16" ? at::kBFloat16 : at::kHalf;
  at::Tensor p = at::ones({64}, dtype).requires_grad_(true);
  torch::OrderedDict<std::string, at::Tensor> named;
  named.insert("p", p);
  auto inner = std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{p}, torch::optim::SGDOptions(0.1));
  hvd::DistributedOptimizerOptions options;
  options.mode = mode == "ps-sync" ? hvd::Exchange::kPsSync : hvd::Exchange::kPsAsync;
  hvd::DistributedOptimizer optimizer(inner, named, options);
  const double eps = dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;  // the spacing at 1
  const at::Tensor g = (at::arange(1, 65, at::kDouble) * (eps / 8 * (r + 1))).to(dtype);
  std::ostringstream log;
  log << "{\"grads\": [";
  for (int s = 0; s < 10; ++s) {
    optimizer.zero_grad();
    if (s % 2) {
      (p * g * 2).sum().backward();
    } else {
      p.mutable_grad() = g.clone();
    }
    optimizer.synchronize();
    log << (s ? ", " : "") << json(p.grad());
    optimizer.step();  // after synchronize(): does not push again
  }
  hvd::barrier();  // every push applied: a last push of nothing brings the servers' parameters
  optimizer.zero_grad();
  p.mutable_grad() = at::zeros_like(p);
  optimizer.step();
  log << "], \"params\": " << json(p) << "}\n";
  std::ofstream(out + "/rank" + std::to_string(r) + ".json") << log.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: " << argv[0]
              << " <out> sync <average|sum> <steps> | <out> <async|async64> <max_staleness> <steps> "
                 "[sgd|sgd_wd|adam|adamw|adagrad|rmsprop]"
                 " | <out> half <ps-sync|ps-async> <bfloat16|float16>\n";
    return 2;
  }
  std::string out = argv[1], kind = argv[2], arg = argv[3];
  int steps = std::atoi(argv[4]);
  torch::set_num_threads(1);
  hvd::init();
  if (kind == "half") {
    int result = runHalf(out, arg, argv[4]);
    hvd::shutdown();
    return result;
  }
  const std::string optimizer = argc == 6 ? argv[5] : "sgd";
  const at::ScalarType dtype = kind == "async64" ? at::kDouble : at::kFloat;
  int result = kind == "sync" ? runSync(out, arg, steps) : runAsync(out, std::stoll(arg), steps, optimizer, dtype);
  hvd::shutdown();
  return result;
}
