// Elastic training from C++ (docs/elastic.md, include/hora/elastic.h): a linear model trained by
// libtorch with hora::torch that keeps training when workers die or hosts come and go.
//
//     horarun -np 3 --min-np 2 -H a:2,b:1 build/release/examples/cpp/elastic_train
//     horarun -np 3 --min-np 2 --servers 1 -H a:2,b:1 build/release/examples/cpp/elastic_train --mode ps-sync
//
// The elastic loop, as hvd.elastic.run does it in Python: hora::torch::init() joins the next
// generation; the workers take rank 0's committed state and train, committing every few steps.
// When a collective fails (a worker was lost) each survivor restores its last commit, leaves the
// ring (shutdown) and joins again; when horarun announces a host change at a commit, every rank
// leaves at that same step and joins again without restoring. A worker that horarun removes gets
// WorkerRemovedError from init() and exits with 0.
//
// With --mode ps-sync or ps-async the gradients go through the job's parameter servers, which
// horarun starts afresh for each generation; a dead server fails the step as a dead worker does,
// and the optimizer made again after init() connects to the new generation's servers. A commit
// holds the optimizer's state too (--optimizer adam: its moments and step); in ps-async that state
// lives on the servers, so a commit pulls it first, and the optimizer made again with it
// registers it as the new servers' starting point.
//
// The batch of step s is drawn from a generator seeded with s and split among the ranks, so the
// redone steps after a reset see the same data and the loss falls the same way at any size.
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hora/elastic.h"
#include "hora/torch.h"

namespace hvd = hora::torch;

namespace {

constexpr int64_t kFeatures = 8;
constexpr int64_t kBatch = 48;  // the whole batch, divided among the ranks

// Thrown at a commit when horarun changed the hosts: every rank re-forms at the same step.
struct HostsChanged {};

// What a failure rolls back to: copies of the parameters, the optimizer's state (serialized;
// empty before the first commit with an optimizer) and the step they were taken at.
class Commit {
 public:
  void save(torch::nn::Module& model, const torch::optim::Optimizer* optimizer, int64_t step) {
    params_.clear();
    for (const auto& p : model.parameters()) params_.push_back(p.detach().clone());
    optimizer_.clear();
    if (optimizer) {
      std::ostringstream out;
      torch::save(*optimizer, out);
      optimizer_ = out.str();
    }
    step_ = step;
  }
  int64_t restore(torch::nn::Module& model) const {
    torch::NoGradGuard no_grad;
    auto params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(params_[i]);
    return step_;
  }
  // Into an optimizer made afresh over the same parameters.
  void restoreOptimizer(torch::optim::Optimizer& optimizer) const {
    if (optimizer_.empty()) return;
    std::istringstream in(optimizer_);
    torch::load(optimizer, in);
  }

 private:
  std::vector<at::Tensor> params_;
  std::string optimizer_;
  int64_t step_ = 0;
};

std::shared_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, torch::nn::Module& model) {
  if (name == "adam") return std::make_shared<torch::optim::Adam>(model.parameters(), torch::optim::AdamOptions(0.02));
  return std::make_shared<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(0.05));
}

// Adam's step count and the sum of its moments' magnitudes (0, 0 for SGD or no state yet).
std::pair<int64_t, double> adamState(torch::optim::Optimizer& optimizer) {
  int64_t steps = 0;
  double moments = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
      steps = std::max(steps, adam->step());
      moments += adam->exp_avg().abs().sum().item<double>() + adam->exp_avg_sq().abs().sum().item<double>();
    }
  }
  return {steps, moments};
}

// Rank 0's value of `x` on every rank.
int64_t fromRankZero(int64_t x, const std::string& name) {
  auto t = torch::tensor({x}, torch::kInt64);
  return hvd::broadcast(t, 0, {name}).item<int64_t>();
}

// This rank's rows of step `step`'s batch and their targets (y = x . w + noise).
std::pair<at::Tensor, at::Tensor> shardOf(int64_t step) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 + step));
  const auto x = torch::randn({kBatch, kFeatures}, gen);
  const auto w = torch::linspace(-1.0, 1.0, kFeatures).reshape({kFeatures, 1});
  const auto y = x.matmul(w) + 0.01 * torch::randn({kBatch, 1}, gen);
  const int64_t begin = kBatch * hvd::rank() / hvd::size(), end = kBatch * (hvd::rank() + 1) / hvd::size();
  return {x.slice(0, begin, end), y.slice(0, begin, end)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Elastic training of a linear model with hora::torch");
  int64_t steps = 300, commit_every = 5;
  double step_sleep = 0.02;
  std::string mode = "allreduce", optimizer_name = "sgd";
  const std::map<std::string, hvd::Exchange> modes = {{"allreduce", hvd::Exchange::kAllreduce},
                                                       {"ps-sync", hvd::Exchange::kPsSync},
                                                       {"ps-async", hvd::Exchange::kPsAsync}};
  app.add_option("--steps", steps, "steps to train");
  app.add_option("--commit-every", commit_every, "steps between commits");
  app.add_option("--step-sleep", step_sleep, "seconds to sleep after each step (to leave time for a kill)");
  app.add_option("--mode", mode, "how gradients travel (ps-sync, ps-async: horarun --servers)")
      ->check(CLI::IsMember(modes));
  app.add_option("--optimizer", optimizer_name, "sgd (lr 0.05) or adam (lr 0.02)")
      ->check(CLI::IsMember({"sgd", "adam"}));
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(0);
  torch::set_num_threads(1);
  torch::nn::Linear model(kFeatures, 1);
  Commit committed;
  committed.save(*model, nullptr, 0);
  int64_t step = 0;
  while (true) {
    try {
      hvd::init();  // in an elastic job: the next generation
    } catch (const hora::WorkerRemovedError& e) {
      std::printf("removed: %s\n", e.what());
      return 0;
    }
    try {
      // Sync: everyone takes rank 0's committed state (a newcomer has none), before the optimizer
      // is wrapped: in ps-async the servers start from worker 0's parameters and optimizer state.
      auto inner = makeOptimizer(optimizer_name, *model);
      committed.restoreOptimizer(*inner);
      hvd::broadcast_parameters(model->named_parameters(), 0);
      hvd::broadcast_optimizer_state(*inner, 0);
      step = fromRankZero(step, "elastic.step");
      int64_t hosts_seen = fromRankZero(hora::elastic::hostUpdates().counter, "elastic.hosts");
      const auto [adam_steps, adam_moments] = adamState(*inner);
      std::printf("optimizer state at step %lld: steps=%lld moments=%.6f\n", static_cast<long long>(step),
                  static_cast<long long>(adam_steps), adam_moments);
      hvd::DistributedOptimizerOptions options;
      options.mode = modes.at(mode);
      hvd::DistributedOptimizer optimizer(inner, model->named_parameters(), options);
      committed.save(*model, inner.get(), step);
      while (step < steps) {
        const auto [x, y] = shardOf(step);
        optimizer.zero_grad();
        const auto loss = torch::mse_loss(model->forward(x), y);
        loss.backward();
        optimizer.step();
        ++step;
        std::printf("step %lld gen=%d rank=%d size=%d pid=%d loss=%.5f\n", static_cast<long long>(step),
                    hvd::engine().identity().generation, hvd::rank(), hvd::size(), static_cast<int>(::getpid()),
                    loss.item<double>());
        std::fflush(stdout);
        if (step % commit_every == 0) {
          if (mode == "ps-async") optimizer.pullServerState();  // the servers hold the optimizer's state
          committed.save(*model, inner.get(), step);
          // Rank 0 asks horarun; all ranks act on its answer, at the same step.
          const int64_t hosts = fromRankZero(hvd::rank() == 0 ? hora::elastic::hostUpdates().counter : 0,
                                             "elastic.hosts");
          if (hosts != hosts_seen) throw HostsChanged{};
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(step_sleep));
      }
      // Every rank must end with the same parameters: their minimum and maximum agree. In
      // ps-async each holds the servers' answer to its own last push, so they may differ.
      std::vector<at::Tensor> flat;
      for (const auto& p : model->parameters()) flat.push_back(p.detach().flatten());
      const auto all = torch::cat(flat);
      const bool identical = torch::equal(hvd::allreduce(all, {"elastic.min", hora::ReduceOp::kMin}),
                                          hvd::allreduce(all, {"elastic.max", hora::ReduceOp::kMax}));
      const auto [x, y] = shardOf(steps);
      if (mode == "ps-async") optimizer.pullServerState();
      std::printf("done rank=%d size=%d loss=%.5f identical=%s optimizer_steps=%lld\n", hvd::rank(), hvd::size(),
                  torch::mse_loss(model->forward(x), y).item<double>(), identical ? "yes" : "no",
                  static_cast<long long>(adamState(*inner).first));
      hvd::shutdown();
      return identical || mode == "ps-async" ? 0 : 1;
    } catch (const HostsChanged&) {
      std::printf("hosts changed at step %lld: re-forming\n", static_cast<long long>(step));
    } catch (const hora::WorkerRemovedError&) {
      throw;
    } catch (const hora::Error& e) {
      // A worker was lost: what was trained since the last commit is redone.
      step = committed.restore(*model);
      std::printf("reset to step %lld after: %s\n", static_cast<long long>(step), e.what());
    }
    std::fflush(stdout);
    hvd::shutdown();
  }
}
