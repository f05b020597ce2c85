// hora::torch on every rank of a real job (ctest runs this alone and under horarun -np 2 and 3).
// Every expected value is computed on each rank from what every rank contributes (each rank's
// input is a function of its rank), or from single-process libtorch training on the whole batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "hora/torch.h"

namespace hvd = hora::torch;

namespace {

const std::vector<at::ScalarType> kTypes = {at::kByte, at::kChar,     at::kShort, at::kInt,   at::kLong,
                                            at::kHalf, at::kBFloat16, at::kFloat, at::kDouble};

std::string typeName(at::ScalarType t) { return c10::toString(t); }

// Rank r's input: small values (so products of int8 fit), non-negative for uint8.
at::Tensor inputOf(int r, at::ScalarType type, int64_t n = 17) {
  at::Tensor i = at::arange(n, at::kLong);
  at::Tensor v = (i * 7 + r * 3) % 5;
  if (type != at::kByte) v = v - 2;
  return v.to(type);
}

// The reduction of every rank's input, computed here in float64 (integers: exactly).
at::Tensor expectedReduction(hora::ReduceOp op, at::ScalarType type, int64_t n = 17) {
  at::Tensor acc = inputOf(0, type, n).to(at::kDouble);
  for (int r = 1; r < hvd::size(); ++r) {
    at::Tensor x = inputOf(r, type, n).to(at::kDouble);
    switch (op) {
      case hora::ReduceOp::kSum:
      case hora::ReduceOp::kAverage: acc = acc + x; break;
      case hora::ReduceOp::kMin: acc = at::minimum(acc, x); break;
      case hora::ReduceOp::kMax: acc = at::maximum(acc, x); break;
      case hora::ReduceOp::kProduct: acc = acc * x; break;
      case hora::ReduceOp::kAdasum: ADD_FAILURE() << "not element-wise"; break;
    }
  }
  if (op == hora::ReduceOp::kAverage) {
    acc = at::isFloatingType(type) ? acc / hvd::size() : at::div(acc, hvd::size(), "trunc");
  }
  return acc.to(type);
}

void expectEqual(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  double tolerance = actual.scalar_type() == at::kBFloat16 ? 2e-2 : actual.scalar_type() == at::kHalf ? 2e-3 : 1e-6;
  EXPECT_TRUE(at::allclose(actual.to(at::kDouble), expected.to(at::kDouble), tolerance, tolerance))
      << what << "\nactual:\n" << actual << "\nexpected:\n" << expected;
}

}  // namespace

TEST(Collectives, AllreduceEveryTypeAndOp) {
  for (at::ScalarType type : kTypes) {
    for (hora::ReduceOp op : {hora::ReduceOp::kSum, hora::ReduceOp::kAverage, hora::ReduceOp::kMin,
                              hora::ReduceOp::kMax, hora::ReduceOp::kProduct}) {
      std::string what = typeName(type) + " " + std::string(hora::toString(op));
      hvd::ReduceOptions options;
      options.op = op;
      options.name = "every." + what;
      expectEqual(hvd::allreduce(inputOf(hvd::rank(), type), options), expectedReduction(op, type), what);
    }
  }
}

TEST(Collectives, AllreduceInPlaceAsyncNonContiguousAndScaled) {
  // In place on a transposed (non-contiguous) view: the result lands in the caller's tensor.
  at::Tensor base = (inputOf(hvd::rank(), at::kFloat, 12).view({3, 4}) + 0.5).contiguous();
  at::Tensor view = base.t();
  ASSERT_FALSE(view.is_contiguous());
  hvd::ReduceOptions sum;
  sum.op = hora::ReduceOp::kSum;
  hvd::allreduce_(view, sum);
  at::Tensor expected = expectedReduction(hora::ReduceOp::kSum, at::kFloat, 12).view({3, 4}) + 0.5 * hvd::size();
  expectEqual(base, expected, "in place, non-contiguous");

  // Several in flight at once, waited in reverse; prescale and postscale.
  std::vector<hvd::TensorHandle> handles;
  for (int i = 0; i < 5; ++i) {
    hvd::ReduceOptions o;
    o.op = hora::ReduceOp::kSum;
    o.prescale_factor = 2.0;
    o.postscale_factor = 0.25;
    o.name = "async." + std::to_string(i);
    handles.push_back(hvd::allreduce_async(inputOf(hvd::rank(), at::kDouble) + i, o));
  }
  for (int i = 4; i >= 0; --i) {
    at::Tensor reference = (expectedReduction(hora::ReduceOp::kSum, at::kDouble) + i * hvd::size()) * 0.5;
    expectEqual(handles[i].wait(), reference, "async " + std::to_string(i));
    EXPECT_TRUE(handles[i].poll());
  }
}

TEST(Collectives, AllgatherWithDifferentFirstDimensions) {
  for (at::ScalarType type : kTypes) {
    // Rank r contributes r + 1 rows of 3 columns.
    auto rowsOf = [&](int r) { return inputOf(r, type, 3 * (r + 1)).view({r + 1, 3}); };
    std::vector<at::Tensor> all;
    for (int r = 0; r < hvd::size(); ++r) all.push_back(rowsOf(r));
    expectEqual(hvd::allgather(rowsOf(hvd::rank())), at::cat(all), "allgather " + typeName(type));
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (at::ScalarType type : kTypes) {
    for (int root = 0; root < hvd::size(); ++root) {
      std::string what = "broadcast " + typeName(type) + " from " + std::to_string(root);
      expectEqual(hvd::broadcast(inputOf(hvd::rank(), type), root), inputOf(root, type), what);
      at::Tensor in_place = inputOf(hvd::rank(), type).view({17, 1});
      hvd::broadcast_(in_place, root);
      expectEqual(in_place, inputOf(root, type).view({17, 1}), what + " in place");
    }
  }
}

TEST(Collectives, AlltoallEvenAndWithSplits) {
  int n = hvd::size(), r = hvd::rank();
  // Even: rank r sends row d (value 100 r + d) to rank d, so it receives 100 s + r from each s.
  at::Tensor even = at::arange(n, at::kInt) + 100 * r;
  at::Tensor expected = at::arange(n, at::kInt) * 100 + r;
  expectEqual(hvd::alltoall(even.view({n, 1})), expected.view({n, 1}), "alltoall even");
  // Uneven: rank r sends d + 1 rows to rank d, each row 1000 r + d; rank r receives r + 1 rows from
  // each rank s.
  std::vector<int64_t> splits;
  std::vector<at::Tensor> rows, received;
  for (int d = 0; d < n; ++d) {
    splits.push_back(d + 1);
    rows.push_back(at::full({d + 1, 2}, 1000.0 * r + d, at::kFloat));
  }
  for (int s = 0; s < n; ++s) received.push_back(at::full({r + 1, 2}, 1000.0 * s + r, at::kFloat));
  expectEqual(hvd::alltoall(at::cat(rows), splits), at::cat(received), "alltoall with splits");
}

TEST(Collectives, ReducescatterKeepsEachRanksBlock) {
  int n = hvd::size(), r = hvd::rank();
  int64_t rows = 2 * n + 1;  // not a multiple: earlier ranks take the remainder
  at::Tensor mine = inputOf(r, at::kFloat, rows * 3).view({rows, 3});
  hvd::ReduceOptions sum;
  sum.op = hora::ReduceOp::kSum;
  at::Tensor whole = expectedReduction(hora::ReduceOp::kSum, at::kFloat, rows * 3).view({rows, 3});
  int64_t begin = 0;
  for (int s = 0; s < r; ++s) begin += rows / n + (s < rows % n ? 1 : 0);
  int64_t count = rows / n + (r < rows % n ? 1 : 0);
  expectEqual(hvd::reducescatter(mine, sum), whole.slice(0, begin, begin + count), "reducescatter");
}

TEST(Collectives, BoolReducesLogicallyAndTravelsAsItIs) {
  // Rank r's element i is true when bit i of r + 1 is set; every rank computes the or and and.
  auto boolsOf = [](int r) { return at::tensor({(r + 1) & 1, (r + 1) & 2, (r + 1) & 4, 1}).to(at::kBool); };
  at::Tensor any = boolsOf(0), all = boolsOf(0);
  std::vector<at::Tensor> every;
  for (int r = 0; r < hvd::size(); ++r) {
    any = at::logical_or(any, boolsOf(r));
    all = at::logical_and(all, boolsOf(r));
    every.push_back(boolsOf(r));
  }
  for (auto [op, expected] : {std::pair{hora::ReduceOp::kSum, any}, {hora::ReduceOp::kMax, any},
                              {hora::ReduceOp::kProduct, all}, {hora::ReduceOp::kMin, all}}) {
    hvd::ReduceOptions o;
    o.op = op;
    expectEqual(hvd::allreduce(boolsOf(hvd::rank()), o), expected, "bool " + std::string(hora::toString(op)));
  }
  expectEqual(hvd::allgather(boolsOf(hvd::rank())), at::cat(every), "bool allgather");
  expectEqual(hvd::broadcast(boolsOf(hvd::rank()), 0), boolsOf(0), "bool broadcast");
  hvd::ReduceOptions average;  // the default op: a bool has no average
  EXPECT_THROW(hvd::allreduce(boolsOf(hvd::rank()), average), hora::InvalidArgumentError);
  hvd::ReduceOptions scaled;
  scaled.op = hora::ReduceOp::kSum;
  scaled.postscale_factor = 2.0;
  EXPECT_THROW(hvd::allreduce(boolsOf(hvd::rank()), scaled), hora::InvalidArgumentError);
}

// Adasum of one tensor from its formula: (1 - a.b/2|a|^2) a + (1 - a.b/2|b|^2) b over a pairwise
// tree of the ranks (0 with 1, 2 with 3, then the pairs), in double.
at::Tensor adasumReference(at::ScalarType type, int64_t n) {
  std::vector<at::Tensor> level;
  for (int r = 0; r < hvd::size(); ++r) level.push_back(inputOf(r, type, n).to(at::kDouble));
  while (level.size() > 1) {
    std::vector<at::Tensor> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      const at::Tensor &a = level[i], &b = level[i + 1];
      const double dot = at::dot(a, b).item<double>(), aa = at::dot(a, a).item<double>(),
                   bb = at::dot(b, b).item<double>();
      next.push_back((1 - dot / (2 * aa)) * a + (1 - dot / (2 * bb)) * b);
    }
    level = std::move(next);
  }
  return level[0];
}

TEST(Collectives, AdasumMatchesItsFormula) {
  const int n = hvd::size();
  hvd::ReduceOptions options;
  options.op = hora::ReduceOp::kAdasum;
  if (n & (n - 1)) {
    // Refused on every rank at enqueue, before anything is sent: the ranks stay in step.
    try {
      hvd::allreduce(inputOf(hvd::rank(), at::kFloat), options);
      FAIL() << "Adasum ran on " << n << " ranks";
    } catch (const hora::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
    }
    return;
  }
  for (at::ScalarType type : {at::kFloat, at::kDouble}) {
    options.name = "adasum." + typeName(type);
    const at::Tensor got = hvd::allreduce(inputOf(hvd::rank(), type, 33), options).to(at::kDouble);
    const at::Tensor want = adasumReference(type, 33);
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6 * want.abs().max().item<double>())) << typeName(type);
  }
  options.name = "adasum.int";
  EXPECT_THROW(hvd::allreduce(inputOf(hvd::rank(), at::kInt), options), hora::InvalidArgumentError);
}

TEST(Errors, UnsupportedTensorsAreRejectedBeforeAnythingIsSent) {
  EXPECT_THROW(hvd::allreduce(at::Tensor()), hora::InvalidArgumentError);
  EXPECT_THROW(hvd::allgather(at::scalar_tensor(1.0)), hora::InvalidArgumentError);
  try {
    hvd::broadcast(at::ones({2}, at::kComplexFloat), 0);
    FAIL() << "complex tensors were accepted";
  } catch (const hora::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
  }
}

TEST(Errors, MismatchedShapesFailOnEveryRank) {
  if (hvd::size() == 1) GTEST_SKIP() << "needs two ranks";
  at::Tensor t = at::ones({hvd::rank() == 0 ? 3 : 4});
  hvd::ReduceOptions o;
  o.name = "mismatched";
  try {
    hvd::allreduce(t, o);
    FAIL() << "a shape mismatch went through";
  } catch (const hora::MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("mismatched"), std::string::npos) << e.what();
  }
  // The job goes on afterwards.
  hvd::ReduceOptions sum;
  sum.op = hora::ReduceOp::kSum;
  EXPECT_EQ(hvd::allreduce(at::ones({1}), sum).item<float>(), hvd::size());
}

TEST(Job, IdentityJoinProcessSetsAndMetrics) {
  EXPECT_TRUE(hvd::is_initialized());
  EXPECT_GE(hvd::rank(), 0);
  EXPECT_LT(hvd::rank(), hvd::size());
  EXPECT_EQ(hvd::local_size() * hvd::cross_size(), hvd::size());  // one host
  std::vector<double> metrics = hvd::average_metrics({double(hvd::rank()), 1.0}, "identity");
  EXPECT_DOUBLE_EQ(metrics[0], (hvd::size() - 1) / 2.0);
  EXPECT_DOUBLE_EQ(metrics[1], 1.0);

  // Join: rank r runs r + 1 allreduces; the others' go on with zeros in place of joined ranks.
  hvd::ReduceOptions sum;
  sum.op = hora::ReduceOp::kSum;
  for (int step = 0; step <= hvd::rank(); ++step) {
    sum.name = "join." + std::to_string(step);
    EXPECT_EQ(hvd::allreduce(at::ones({2}), sum)[0].item<float>(), hvd::size() - step) << "step " << step;
  }
  EXPECT_EQ(hvd::join(), hvd::size() - 1);
  hvd::barrier();

  if (hvd::size() < 2) return;
  int low = hvd::add_process_set({0, 1});
  if (hvd::rank() <= 1) {
    hvd::ReduceOptions in_set;
    in_set.op = hora::ReduceOp::kSum;
    in_set.process_set = low;
    EXPECT_EQ(hvd::allreduce(at::full({1}, hvd::rank() + 1.0), in_set).item<float>(), 3.0);
  }
  hvd::remove_process_set(low);
}

// --- training -------------------------------------------------------------------------------------

namespace {

torch::nn::Sequential makeModel(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 3));
}

// The whole batch of a step: every rank's micro-batches of `rows` rows, in rank order.
std::pair<at::Tensor, at::Tensor> globalBatch(int step, int64_t rows, int micro) {
  auto generator = at::detail::createCPUGenerator(100 + step);
  int64_t n = hvd::size() * rows * micro;
  return {at::randn({n, 6}, generator), at::randint(0, 3, {n}, generator, at::kLong)};
}

at::Tensor shardOf(const at::Tensor& x, int rank, int64_t rows, int k, int micro) {
  return x.slice(0, (rank * micro + k) * rows, (rank * micro + k + 1) * rows);
}

using OptimizerFactory = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// DistributedOptimizer on each rank's shard == one optimizer on the whole batch, whose loss is
// the mean over ranks of each rank's (summed over micro-batches) loss.
void expectTrainingOnTheWholeBatch(const OptimizerFactory& make, int micro, hvd::DistributedOptimizerOptions o,
                                   double tolerance) {
  int n = hvd::size(), r = hvd::rank();
  int64_t rows = 4;
  torch::nn::Sequential model = makeModel(r), reference = makeModel(0);  // made equal by the broadcast
  auto inner = make(model->parameters());
  o.backward_passes_per_step = micro;
  hvd::DistributedOptimizer optimizer(inner, model->named_parameters(), o);
  hvd::broadcast_parameters(model->named_parameters(), 0);
  hvd::broadcast_optimizer_state(*inner, 0);
  auto reference_optimizer = make(reference->parameters());
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = globalBatch(step, rows, micro);
    optimizer.zero_grad();
    for (int k = 0; k < micro; ++k) {
      torch::nn::functional::cross_entropy(model->forward(shardOf(x, r, rows, k, micro)), shardOf(y, r, rows, k, micro))
          .backward();
    }
    optimizer.step();
    reference_optimizer->zero_grad();
    at::Tensor total = at::zeros({});
    for (int s = 0; s < n; ++s) {
      for (int k = 0; k < micro; ++k) {
        total = total + torch::nn::functional::cross_entropy(reference->forward(shardOf(x, s, rows, k, micro)),
                                                             shardOf(y, s, rows, k, micro));
      }
    }
    (total / n).backward();
    reference_optimizer->step();
  }
  auto mine = model->named_parameters();
  auto theirs = reference->named_parameters();
  for (const auto& item : mine) {
    EXPECT_TRUE(at::allclose(item.value(), theirs[item.key()], tolerance, tolerance))
        << item.key() << " (micro " << micro << ")\n" << item.value() << "\n" << theirs[item.key()];
  }
}

std::shared_ptr<torch::optim::Optimizer> sgd(std::vector<at::Tensor> p) {
  return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
}
std::shared_ptr<torch::optim::Optimizer> adam(std::vector<at::Tensor> p) {
  return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
}

}  // namespace

TEST(Training, DistributedOptimizerEqualsTrainingOnTheWholeBatch) {
  for (int micro : {1, 2}) {
    expectTrainingOnTheWholeBatch(sgd, micro, {}, 1e-5);
    expectTrainingOnTheWholeBatch(adam, micro, {}, 1e-5);
  }
}

TEST(Training, Fp16CompressionAndPredivideStayClose) {
  hvd::DistributedOptimizerOptions o;
  o.compression = hvd::Compression::kFP16;
  o.gradient_predivide_factor = 2.0;
  expectTrainingOnTheWholeBatch(sgd, 1, o, 2e-3);
}

TEST(Training, BroadcastOptimizerStateCopiesMomentumAdamMomentsAndOptions) {
  int r = hvd::rank(), root = hvd::size() - 1;
  // Each rank takes one local step with gradient (r + 1) everywhere and its own learning rate.
  auto stepWithRankGradients = [&](torch::optim::Optimizer& optimizer, std::vector<at::Tensor>& params) {
    for (at::Tensor& p : params) p.mutable_grad() = at::full_like(p, r + 1.0);
    optimizer.step();
  };
  torch::nn::Sequential model = makeModel(0);
  std::vector<at::Tensor> params = model->parameters();
  torch::optim::SGD momentum(params, torch::optim::SGDOptions(0.1 * (r + 1)).momentum(0.9));
  stepWithRankGradients(momentum, params);
  hvd::broadcast_optimizer_state(momentum, root);
  EXPECT_DOUBLE_EQ(momentum.param_groups()[0].options().get_lr(), 0.1 * (root + 1));
  for (const at::Tensor& p : params) {
    auto& state = static_cast<torch::optim::SGDParamState&>(*momentum.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    // The first step's momentum buffer is the gradient: root's is root + 1.
    EXPECT_TRUE(at::allclose(state.momentum_buffer(), at::full_like(p, root + 1.0)));
  }

  torch::optim::Adam adam_optimizer(params, torch::optim::AdamOptions(0.01).betas({0.9, 0.99}));
  stepWithRankGradients(adam_optimizer, params);
  stepWithRankGradients(adam_optimizer, params);
  hvd::broadcast_optimizer_state(adam_optimizer, root);
  double g = root + 1.0;
  for (const at::Tensor& p : params) {
    auto& state =
        static_cast<torch::optim::AdamParamState&>(*adam_optimizer.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    EXPECT_EQ(state.step(), 2);
    EXPECT_TRUE(at::allclose(state.exp_avg(), at::full_like(p, (1 - 0.9 * 0.9) * g)));         // two steps of g
    EXPECT_TRUE(at::allclose(state.exp_avg_sq(), at::full_like(p, (1 - 0.99 * 0.99) * g * g)));
  }

  // Root's state still empty: every rank's is cleared.
  torch::optim::SGD fresh(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  if (r != root) stepWithRankGradients(fresh, params);
  hvd::broadcast_optimizer_state(fresh, root);
  EXPECT_TRUE(fresh.state().empty());
}

TEST(Training, BroadcastParametersAndBuffers) {
  torch::manual_seed(hvd::rank());
  torch::nn::BatchNorm1d norm(5);
  norm->forward(at::randn({8, 5}));  // rank-specific running statistics
  torch::manual_seed(0);
  torch::nn::BatchNorm1d root_norm(5);
  root_norm->forward(at::randn({8, 5}));  // rank 0's, computed here
  hvd::broadcast_parameters(norm->named_parameters(), 0);
  hvd::broadcast_parameters(norm->named_buffers(), 0);
  EXPECT_TRUE(at::equal(norm->running_mean, root_norm->running_mean));
  EXPECT_TRUE(at::equal(norm->running_var, root_norm->running_var));
  EXPECT_TRUE(at::equal(norm->weight, root_norm->weight));
}

TEST(Training, UnusedParametersAreReducedAsZerosAndMisuseIsReported) {
  if (hvd::size() == 1) GTEST_SKIP() << "no hooks in a job of one";
  torch::nn::Sequential model = makeModel(0);
  auto inner = sgd(model->parameters());
  hvd::DistributedOptimizer optimizer(inner, model->named_parameters());
  auto named = model->named_parameters();
  // Only rank 0 uses the last layer: the others' zeros make its gradient rank 0's / size.
  at::Tensor x = at::ones({2, 6});
  at::Tensor hidden = model[1]->as<torch::nn::Tanh>()->forward(model[0]->as<torch::nn::Linear>()->forward(x));
  at::Tensor loss = hvd::rank() == 0 ? model[2]->as<torch::nn::Linear>()->forward(hidden).sum() : hidden.sum();
  loss.backward();
  EXPECT_THROW(optimizer.zero_grad(), hora::InvalidArgumentError);  // gradients in flight
  optimizer.synchronize();
  at::Tensor bias_grad = named["2.bias"].grad();
  EXPECT_TRUE(at::allclose(bias_grad, at::full({3}, 2.0 / hvd::size()))) << bias_grad;
  optimizer.step();  // after synchronize(): no second reduction

  // Two backward passes with backward_passes_per_step 1: reported in the second.
  optimizer.zero_grad();
  model->forward(x).sum().backward();
  EXPECT_ANY_THROW(model->forward(x).sum().backward());
  optimizer.synchronize();
}

namespace {

// `make` throws InvalidArgumentError whose message contains every one of `words`.
void expectInvalidArgument(const std::function<void()>& make, const std::vector<std::string>& words) {
  try {
    make();
    ADD_FAILURE() << "no error; expected one naming " << words.front();
  } catch (const hora::InvalidArgumentError& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

}  // namespace

// The parameter server modes' options are refused before any server is asked (the modes
// themselves run under horarun --servers: tests/python/test_parameter_servers.py).
TEST(ParameterServerModes, UnsupportedOptionsAreRefusedNamingTheOptionAndValue) {
  torch::nn::Sequential model = makeModel(0);
  auto named = model->named_parameters();
  auto make = [&](hvd::DistributedOptimizerOptions o, std::shared_ptr<torch::optim::Optimizer> inner = nullptr) {
    return [&, o, inner] { hvd::DistributedOptimizer(inner ? inner : sgd(model->parameters()), named, o); };
  };
  hvd::DistributedOptimizerOptions o;
  o.max_staleness = 2;
  expectInvalidArgument(make(o), {"max_staleness (2)", "kPsAsync only", "Exchange::kAllreduce"});
  o.mode = hvd::Exchange::kPsSync;
  expectInvalidArgument(make(o), {"max_staleness (2)", "Exchange::kPsSync"});
  o.mode = hvd::Exchange::kPsAsync;
  o.max_staleness = -3;
  expectInvalidArgument(make(o), {"max_staleness", "-3"});

  for (hvd::Exchange mode : {hvd::Exchange::kPsSync, hvd::Exchange::kPsAsync}) {
    hvd::DistributedOptimizerOptions ps;
    ps.mode = mode;
    hvd::DistributedOptimizerOptions bad = ps;
    bad.process_set = 1;
    expectInvalidArgument(make(bad), {"process_set", "got 1"});
    bad = ps;
    bad.gradient_predivide_factor = 2.0;
    expectInvalidArgument(make(bad), {"gradient_predivide_factor", "2"});
    bad = ps;
    bad.op = hora::ReduceOp::kAdasum;
    expectInvalidArgument(make(bad), {"op must be Average or Sum"});
  }

  hvd::DistributedOptimizerOptions async;
  async.mode = hvd::Exchange::kPsAsync;
  std::vector<at::Tensor> params = model->parameters();
  expectInvalidArgument(make(async, std::make_shared<torch::optim::LBFGS>(params)),
                        {"the servers run SGD, Adam, AdamW, Adagrad or"});
  expectInvalidArgument(make(async, std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.1).amsgrad(true))),
                        {"the servers' Adam has no amsgrad"});
  expectInvalidArgument(
      make(async, std::make_shared<torch::optim::AdamW>(params, torch::optim::AdamWOptions(0.1).amsgrad(true))),
      {"the servers' AdamW has no amsgrad"});
  using torch::optim::SGDOptions;
  expectInvalidArgument(make(async, std::make_shared<torch::optim::SGD>(params, SGDOptions(0.1).momentum(0.9).nesterov(true))),
                        {"no nesterov"});
  expectInvalidArgument(make(async, std::make_shared<torch::optim::SGD>(params, SGDOptions(0.1).momentum(0.9).dampening(0.5))),
                        {"no dampening", "0.5"});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{params[0], params[1]}, std::make_unique<SGDOptions>(0.1));
  groups.emplace_back(std::vector<at::Tensor>{params[2], params[3]}, std::make_unique<SGDOptions>(0.2));
  expectInvalidArgument(make(async, std::make_shared<torch::optim::SGD>(groups, SGDOptions(0.1))),
                        {"same lr and momentum", "group 1", "0.2"});
  // The servers hold one weight decay for the whole shard.
  std::vector<torch::optim::OptimizerParamGroup> decays;
  decays.emplace_back(std::vector<at::Tensor>{params[0], params[1]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.1).weight_decay(0.01)));
  decays.emplace_back(std::vector<at::Tensor>{params[2], params[3]},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(0.1).weight_decay(0.0)));
  expectInvalidArgument(make(async, std::make_shared<torch::optim::AdamW>(decays, torch::optim::AdamWOptions(0.1))),
                        {"same weight_decay", "group 1", "0.01"});

  // Floating CPU parameters of the servers' types only (float32, float64, float16, bfloat16), and
  // float64 not through float16 (it would keep 11 of its 53 bits).
  torch::nn::Linear complex(3, 2);
  complex->to(at::kComplexFloat);
  hvd::DistributedOptimizerOptions sync;
  sync.mode = hvd::Exchange::kPsSync;
  expectInvalidArgument(
      [&] { hvd::DistributedOptimizer(sgd(complex->parameters()), complex->named_parameters(), sync); },
      {"float32, float64, float16 or bfloat16 CPU", "weight", "ComplexFloat"});
  torch::nn::Linear doubled(3, 2);
  doubled->to(at::kDouble);
  sync.compression = hvd::Compression::kFP16;
  expectInvalidArgument(
      [&] { hvd::DistributedOptimizer(sgd(doubled->parameters()), doubled->named_parameters(), sync); },
      {"Compression::kFP16", "weight", "float64"});
}

TEST(ParameterServerModes, AJobWithoutServersIsToldToStartThem) {
  const char* servers = std::getenv("HORA_PS_SERVERS");
  if (servers && std::string(servers) != "0") GTEST_SKIP() << "this job has parameter servers";
  torch::nn::Sequential model = makeModel(0);
  for (hvd::Exchange mode : {hvd::Exchange::kPsSync, hvd::Exchange::kPsAsync}) {
    hvd::DistributedOptimizerOptions o;
    o.mode = mode;
    expectInvalidArgument([&] { hvd::DistributedOptimizer(sgd(model->parameters()), model->named_parameters(), o); },
                          {"no parameter servers", "horarun --servers K"});
  }
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  hvd::init();
  int result = RUN_ALL_TESTS();
  hvd::shutdown();
  return result;
}
