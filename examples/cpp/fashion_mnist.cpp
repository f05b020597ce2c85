// Fashion-MNIST on N workers with hora::torch: the same training as
// examples/pytorch/fashion_mnist.py (the Horovod tutorial's WideResNet), in C++ with libtorch.
//
//     horarun -np 2 build/release/examples/cpp/fashion_mnist              # WRN-16-1
//     horarun -np 2 build/release/examples/cpp/fashion_mnist --width 10   # the tutorial's WRN-16-10
//     horarun -np 2 --servers 1 build/release/examples/cpp/fashion_mnist --mode ps-sync   # parameter servers
//
// The hora lines are marked "hora:"; without them this is a single-process program.
#include <torch/torch.h>
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hora/torch.h"

namespace hvd = hora::torch;
namespace nn = torch::nn;

struct Args {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string model = "wrn";
  int width = 1;
  int batch_size = 32;
  int val_batch_size = 256;
  int epochs = 40;
  double base_lr = 0.01;
  double momentum = 0.9;
  double wd = 0.000005;
  double warmup_epochs = 1.0;
  double target_accuracy = 0.85;
  int patience = 2;
  bool no_augment = false;
  int64_t train_limit = 0;
  bool fp16_allreduce = false;
  std::string mode = "allreduce";
  int threads = 0;
  std::string checkpoint = "checkpoints/fashion_mnist_cpp.pt";
  bool resume = false;
  std::string timeline;
  uint64_t seed = 42;
};

// --- data -----------------------------------------------------------------------------------------

// An IDX file (the MNIST format), gzipped: a big-endian magic whose last byte is the number of
// dimensions, the dimensions (big-endian uint32), then uint8 data.
torch::Tensor readIdx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  int n;
  while ((n = gzread(f, chunk, sizeof chunk)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  gzclose(f);
  if (n < 0 || bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08) {
    throw std::runtime_error(path + " is not a gzipped IDX file of uint8");
  }
  size_t dims = bytes[3], offset = 4 + 4 * dims, count = 1;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < dims && 8 + 4 * d <= bytes.size(); ++d) {
    const uint8_t* p = &bytes[4 + 4 * d];
    shape.push_back(int64_t(p[0]) << 24 | int64_t(p[1]) << 16 | int64_t(p[2]) << 8 | p[3]);
    count *= shape.back();
  }
  if (shape.size() != dims || bytes.size() != offset + count) {
    throw std::runtime_error(path + ": the dimensions do not match the data");
  }
  return torch::from_blob(bytes.data() + offset, shape, torch::kUInt8).clone();
}

struct Split {
  torch::Tensor images, labels;
};

Split load(const std::string& dir, const std::string& prefix) {
  return {readIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz"),
          readIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz").to(torch::kLong)};
}

// torch.utils.data.DistributedSampler: every epoch one permutation (seeded by seed + epoch, the
// same on every rank), padded to a multiple of the ranks; rank r takes every size-th index.
torch::Tensor shardIndices(int64_t n, int rank, int size, bool shuffle, uint64_t seed, int epoch) {
  torch::Tensor order = torch::arange(n);
  if (shuffle) {
    auto generator = at::detail::createCPUGenerator(seed + epoch);
    order = torch::randperm(n, generator, torch::kLong);
  }
  int64_t per_rank = (n + size - 1) / size;
  if (per_rank * size > n) order = torch::cat({order, order.slice(0, 0, per_rank * size - n)});
  return order.slice(0, rank, per_rank * size, size);
}

// The tutorial's ImageDataGenerator on a (N, 1, 28, 28) batch: random horizontal flips and shifts
// of up to 20% of the width and height (zero fill), as one gather for the whole batch.
torch::Tensor augment(const torch::Tensor& x) {
  using torch::indexing::None;
  using torch::indexing::Slice;
  int64_t n = x.size(0), pad = 6;  // 20% of 28, rounded up
  torch::Tensor flip = (torch::rand({n}) < 0.5).view({n, 1, 1, 1});
  torch::Tensor flipped = torch::where(flip, x.flip({3}), x);
  torch::Tensor padded = torch::constant_pad_nd(flipped, {pad, pad, pad, pad});
  torch::Tensor rows = torch::randint(0, 2 * pad + 1, {n, 1}) + torch::arange(28);
  torch::Tensor cols = torch::randint(0, 2 * pad + 1, {n, 1}) + torch::arange(28);
  torch::Tensor batch = torch::arange(n).view({n, 1, 1});
  return padded.index({batch, 0, rows.index({Slice(), Slice(), None}), cols.index({Slice(), None, Slice()})})
      .unsqueeze(1);
}

// --- models ---------------------------------------------------------------------------------------

// conv 3x3 - batch norm - relu.
struct ConvBnReluImpl : nn::Module {
  ConvBnReluImpl(int64_t cin, int64_t cout)
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(cin, cout, 3).padding(1)))),
        norm(register_module("norm", nn::BatchNorm2d(cout))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(norm(conv(x))); }

  nn::Conv2d conv;
  nn::BatchNorm2d norm;
};
TORCH_MODULE(ConvBnRelu);

// The tutorial's residual block: conv-bn-relu, dropout 0.01, conv-bn-relu, plus the input (through
// a 1x1 convolution where the width changes).
struct ConvBlockImpl : nn::Module {
  ConvBlockImpl(int64_t cin, int64_t cout)
      : first(register_module("first", ConvBnRelu(cin, cout))),
        dropout(register_module("dropout", nn::Dropout(0.01))),
        second(register_module("second", ConvBnRelu(cout, cout))) {
    if (cin != cout) shortcut = register_module("shortcut", nn::Conv2d(nn::Conv2dOptions(cin, cout, 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return (shortcut ? shortcut(x) : x) + second(dropout(first(x))); }

  ConvBnRelu first;
  nn::Dropout dropout;
  ConvBnRelu second;
  nn::Conv2d shortcut{nullptr};
};
TORCH_MODULE(ConvBlock);

// WideResNet-16-k as the tutorial builds it (after keras_contrib).
nn::Sequential wideResnet(int64_t width, int64_t classes = 10) {
  int64_t c0 = 16 * width, c1 = 32 * width, c2 = 64 * width;
  return nn::Sequential(ConvBnRelu(1, 16), ConvBlock(16, c0), ConvBlock(c0, c0), nn::MaxPool2d(2), ConvBlock(c0, c1),
                        ConvBlock(c1, c1), nn::MaxPool2d(2), ConvBlock(c1, c2), ConvBlock(c2, c2),
                        nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(c2, classes));
}

// 2 convolutions + 2 fully connected layers (434,041 parameters).
nn::Sequential smallCnn(int64_t classes = 10) {
  return nn::Sequential(nn::Conv2d(1, 32, 3), nn::ReLU(), nn::Conv2d(32, 64, 3), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(64 * 12 * 12, 45), nn::ReLU(), nn::Linear(45, classes));
}

// The tutorial's step decay, as a multiplier of the (scaled) learning rate.
double tutorialSchedule(int epoch) { return epoch < 15 ? 1.0 : epoch < 25 ? 1e-1 : epoch < 35 ? 1e-2 : 1e-3; }

// LearningRateWarmupCallback: from base_lr to base_lr x size over warmup_epochs (fractional).
double warmupLr(const Args& a, double progress) {
  double scale = hvd::size();
  if (a.warmup_epochs <= 0 || progress >= a.warmup_epochs) return a.base_lr * scale;
  return a.base_lr * (1 + (scale - 1) * progress / a.warmup_epochs);
}

void setLr(hvd::DistributedOptimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

// Written by rank 0 after every epoch, to a temporary file renamed over the last one.
void saveCheckpoint(const std::string& path, nn::Sequential& model, torch::optim::Optimizer& optimizer,
                    int epoch, int met_target, double time) {
  std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  torch::serialize::OutputArchive archive;
  model->save(archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("progress", torch::tensor({double(epoch), double(met_target), time}, torch::kDouble));
  std::string temporary = path + ".tmp";
  archive.save_to(temporary);
  std::filesystem::rename(temporary, target);
}

int run(const Args& a) {
  hvd::init();                                                                  // hora: join the job
  torch::manual_seed(a.seed);
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int threads = a.threads ? a.threads : std::max(1, cores / hvd::local_size());  // hora: share the host
  torch::set_num_threads(threads);
  bool verbose = hvd::rank() == 0;                                              // hora: log on rank 0 only
  if (!a.timeline.empty()) hvd::start_timeline(a.timeline);

  Split train = load(a.data_dir, "train"), test = load(a.data_dir, "t10k");
  if (a.train_limit > 0) train = {train.images.slice(0, 0, a.train_limit), train.labels.slice(0, 0, a.train_limit)};
  torch::Tensor pixels = train.images.to(torch::kFloat) / 255;
  double mean = pixels.mean().item<double>(), stdev = pixels.std().item<double>();  // featurewise
  auto prepare = [&](const torch::Tensor& x) { return ((x.to(torch::kFloat) / 255 - mean) / stdev).unsqueeze(1); };

  nn::Sequential model = a.model == "wrn" ? wideResnet(a.width) : smallCnn();
  // hora: scale the learning rate by the number of workers (warmed up below).
  auto sgd = std::make_shared<torch::optim::SGD>(
      model->parameters(), torch::optim::SGDOptions(a.base_lr * hvd::size()).momentum(a.momentum).weight_decay(a.wd));
  torch::Tensor progress = torch::zeros({3}, torch::kDouble);  // epochs done, epochs at target, seconds
  if (a.resume && std::filesystem::exists(a.checkpoint) && verbose) {  // hora: rank 0 reads it
    torch::serialize::InputArchive archive;
    archive.load_from(a.checkpoint);
    model->load(archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    sgd->load(optimizer_archive);
    archive.read("progress", progress);
    progress[0] += 1;
  }
  // hora: start every worker from rank 0's weights, buffers, optimizer state and progress.
  hvd::broadcast_parameters(model->named_parameters(), 0);
  hvd::broadcast_parameters(model->named_buffers(), 0);
  hvd::broadcast_optimizer_state(*sgd, 0);
  hvd::broadcast_(progress, 0, {"progress"});
  int start_epoch = static_cast<int>(progress[0].item<double>());
  int met_target = static_cast<int>(progress[1].item<double>());
  double total_time = progress[2].item<double>();
  if (verbose && start_epoch > 0) std::cout << "resumed from " << a.checkpoint << " after epoch " << start_epoch << "\n";

  // hora: average gradients across workers, overlapping the allreduce with the backward pass.
  hvd::DistributedOptimizerOptions options;
  options.compression = a.fp16_allreduce ? hvd::Compression::kFP16 : hvd::Compression::kNone;
  options.mode = a.mode == "ps-sync"    ? hvd::Exchange::kPsSync
                 : a.mode == "ps-async" ? hvd::Exchange::kPsAsync
                                        : hvd::Exchange::kAllreduce;
  hvd::DistributedOptimizer optimizer(sgd, model->named_parameters(), options);

  int64_t n_train = train.images.size(0);
  int64_t steps_per_epoch = ((n_train + hvd::size() - 1) / hvd::size() + a.batch_size - 1) / a.batch_size;
  if (verbose) {
    int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    std::cout << a.model << (a.model == "wrn" ? "-16-" + std::to_string(a.width) : "") << ": " << params
              << " parameters; " << hvd::size() << " workers x " << threads << " threads; batch " << a.batch_size
              << " per worker (" << a.batch_size * hvd::size() << " global); " << n_train << " training images"
              << std::endl;
  }

  double accuracy = 0, reached_at = -1;
  for (int epoch = start_epoch; epoch < a.epochs; ++epoch) {
    model->train();
    // hora: each worker reads its own shard of the data.
    torch::Tensor shard = shardIndices(n_train, hvd::rank(), hvd::size(), true, a.seed, epoch);
    auto epoch_start = std::chrono::steady_clock::now();
    double train_loss = 0;
    int64_t seen = 0;
    for (int64_t step = 0; step * a.batch_size < shard.size(0); ++step) {
      torch::Tensor index = shard.slice(0, step * a.batch_size, (step + 1) * a.batch_size);
      torch::Tensor x = train.images.index_select(0, index), y = train.labels.index_select(0, index);
      setLr(optimizer, epoch < a.warmup_epochs ? warmupLr(a, epoch + double(step) / steps_per_epoch)
                                               : a.base_lr * hvd::size() * tutorialSchedule(epoch));
      optimizer.zero_grad();
      torch::Tensor inputs = a.no_augment ? prepare(x) : augment(prepare(x));
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(inputs), y);
      loss.backward();
      optimizer.step();
      train_loss += loss.item<double>() * x.size(0);
      seen += x.size(0);
    }
    double epoch_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    total_time += epoch_time;

    model->eval();
    double correct = 0, count = 0, val_loss = 0;
    {
      torch::NoGradGuard no_grad;
      torch::Tensor test_shard = shardIndices(test.images.size(0), hvd::rank(), hvd::size(), false, 0, 0);
      for (int64_t begin = 0; begin < test_shard.size(0); begin += a.val_batch_size) {
        torch::Tensor index = test_shard.slice(0, begin, begin + a.val_batch_size);
        torch::Tensor y = test.labels.index_select(0, index);
        torch::Tensor out = model->forward(prepare(test.images.index_select(0, index)));
        val_loss += torch::nn::functional::cross_entropy(
                        out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                        .item<double>();
        correct += (out.argmax(1) == y).sum().item<double>();
        count += y.size(0);
      }
    }
    // hora: average the metrics over the workers (each saw its shard of the test set).
    std::vector<double> metrics =
        hvd::average_metrics({train_loss / seen, val_loss / count, correct / count}, "epoch");
    accuracy = metrics[2];
    if (verbose) {
      std::printf("epoch %d: loss %.4f val_loss %.4f val_accuracy %.4f | %.1f images/sec | epoch %.1f s, "
                  "cumulative %.1f s\n",
                  epoch + 1, metrics[0], metrics[1], accuracy, seen * hvd::size() / epoch_time, epoch_time,
                  total_time);
      std::fflush(stdout);
    }
    met_target = accuracy > a.target_accuracy ? met_target + 1 : 0;
    if (accuracy > a.target_accuracy && reached_at < 0) reached_at = total_time;
    if (verbose) saveCheckpoint(a.checkpoint, model, *sgd, epoch, met_target, total_time);  // hora: rank 0 writes
    if (met_target >= a.patience) {
      if (verbose) {
        std::printf("early stopping after epoch %d: validation accuracy above %.2f for %d epochs\n", epoch + 1,
                    a.target_accuracy, a.patience);
      }
      break;
    }
  }
  if (!a.timeline.empty()) hvd::stop_timeline();
  if (verbose) {
    std::printf("RESULT accuracy=%.4f target=%.2f reached=%s time_to_target_s=%.1f train_time_s=%.1f checkpoint=%s\n",
                accuracy, a.target_accuracy, accuracy > a.target_accuracy ? "yes" : "no",
                reached_at < 0 ? std::nan("") : reached_at, total_time,
                std::filesystem::absolute(a.checkpoint).c_str());
    std::fflush(stdout);
  }
  hvd::shutdown();
  return 0;
}

int main(int argc, char** argv) {
  Args a;
  CLI::App app("Fashion-MNIST with hora::torch (the C++ twin of examples/pytorch/fashion_mnist.py)");
  app.add_option("--data-dir", a.data_dir, "the IDX .gz files (Debian: dataset-fashion-mnist)")->capture_default_str();
  app.add_option("--model", a.model, "the tutorial's WideResNet, or a small CNN")
      ->check(CLI::IsMember({"wrn", "cnn"}))->capture_default_str();
  app.add_option("--width", a.width, "WideResNet width k (channels 16k, 32k, 64k); 10 = WRN-16-10")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "batch size per worker")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--val-batch-size", a.val_batch_size, "validation batch size per worker")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--epochs", a.epochs, "most epochs to train")->capture_default_str();
  app.add_option("--base-lr", a.base_lr, "learning rate of one worker (scaled by the worker count)")->capture_default_str();
  app.add_option("--momentum", a.momentum)->capture_default_str();
  app.add_option("--wd", a.wd, "weight decay")->capture_default_str();
  app.add_option("--warmup-epochs", a.warmup_epochs, "epochs to ramp lr from base-lr to base-lr x size")->capture_default_str();
  app.add_option("--target-accuracy", a.target_accuracy, "stop when validation accuracy exceeds this")->capture_default_str();
  app.add_option("--patience", a.patience, "epochs at the target before stopping")->capture_default_str();
  app.add_flag("--no-augment", a.no_augment, "train without the random flips and shifts");
  app.add_option("--train-limit", a.train_limit, "use only the first N training images (0 = all)")->capture_default_str();
  app.add_flag("--fp16-allreduce", a.fp16_allreduce, "compress gradients to float16 for the allreduce");
  app.add_option("--mode", a.mode,
                 "how gradients travel: allreduce, or through the parameter servers of horarun --servers K "
                 "(ps-async: with --wd 0; its servers keep the first lr)")
      ->check(CLI::IsMember({"allreduce", "ps-sync", "ps-async"}))->capture_default_str();
  app.add_option("--threads", a.threads, "torch threads per worker (0: cores / local workers)")->capture_default_str();
  app.add_option("--checkpoint", a.checkpoint, "written by rank 0 after every epoch")->capture_default_str();
  app.add_flag("--resume", a.resume, "continue from --checkpoint");
  app.add_option("--timeline", a.timeline, "write hora's timeline (Chrome trace) to this file");
  app.add_option("--seed", a.seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "fashion_mnist: " << e.what() << std::endl;
    return 1;
  }
}
