// hora::torch's job and collectives: a torch::Tensor in, a hora::Request to the process's Engine.
#include <cstdlib>
#include <map>
#include <optional>
#include <mutex>
#include <string>

#include "hora/communicator.h"
#include "hora/torch.h"

namespace hora::torch {

// What a TensorHandle waits for: the engine's handle, the result, and the tensors the engine
// reads or writes (alive until it completes).
struct TensorHandle::State {
  std::optional<Handle> handle;  // set once enqueued
  at::Tensor result;   // in place or preallocated; empty when the engine allocates it
  at::Tensor source;   // the contiguous input
  std::shared_ptr<at::Tensor> allocated;  // set on the engine thread by allocate_output
  at::Tensor original;  // in place on a non-contiguous tensor: copied back after completion
};

namespace {

std::mutex engine_mutex;                   // init / shutdown
std::unique_ptr<hora::Engine> the_engine;  // between init and shutdown

std::mutex names_mutex;
std::map<std::string, uint64_t> unnamed_counts;  // per operation, for "<op>.noname.<n>"

std::string nameFor(const char* op, const std::string& given) {
  if (!given.empty()) return given;
  std::lock_guard lock(names_mutex);
  return std::string(op) + ".noname." + std::to_string(unnamed_counts[op]++);
}

DataType dataTypeOf(const at::Tensor& t, const char* op) {
  if (!t.defined()) throw InvalidArgumentError(std::string(op) + ": the tensor is undefined");
  if (!t.device().is_cpu()) {
    throw InvalidArgumentError(std::string(op) + ": hora runs on CPU tensors; got one on " + t.device().str());
  }
  switch (t.scalar_type()) {
    case at::kByte: return DataType::kUInt8;
    case at::kChar: return DataType::kInt8;
    case at::kShort: return DataType::kInt16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kBool: return DataType::kBool;
    default: {
      std::string message = std::string(op) + ": dtype ";
      message.append(c10::toString(t.scalar_type()));
      message.append(" is not supported (uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool)");
      throw InvalidArgumentError(message);
    }
  }
}

// A request for `tensor` with its name, type and shape filled in.
Request requestFor(CollectiveKind op, const at::Tensor& tensor, const std::string& name, int process_set) {
  const std::string op_name(hora::toString(op));
  Request r;
  r.op = op;
  r.type = dataTypeOf(tensor, op_name.c_str());
  r.name = nameFor(op_name.c_str(), name);
  r.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  r.process_set = process_set;
  return r;
}

AllreduceOptions reduceOptions(const ReduceOptions& o) {
  AllreduceOptions r;
  r.op = o.op;
  r.prescale = o.prescale_factor;
  r.postscale = o.postscale_factor;
  return r;
}

// Sends r with `source` as input, writing into `output` (defined) or into a tensor the engine
// allocates once the shape is negotiated (undefined).
TensorHandle submit(Request r, at::Tensor source, at::Tensor output, at::Tensor original = {}) {
  auto state = std::make_shared<TensorHandle::State>();
  r.input = source.data_ptr();
  if (output.defined()) {
    r.output = output.data_ptr();
  } else {
    state->allocated = std::make_shared<at::Tensor>();
    r.allocate_output = [allocated = state->allocated, options = source.options()](const std::vector<int64_t>& shape) {
      *allocated = at::empty(shape, options);
      return allocated->data_ptr();
    };
  }
  state->result = std::move(output);
  state->source = std::move(source);
  state->original = std::move(original);
  state->handle.emplace(engine().enqueue(std::move(r)));
  return TensorHandle(std::move(state));
}

}  // namespace

bool TensorHandle::poll() const {
  if (!state_) throw InvalidArgumentError("poll() on an empty TensorHandle");
  return state_->handle->poll();
}

at::Tensor TensorHandle::wait() const {
  if (!state_) throw InvalidArgumentError("wait() on an empty TensorHandle");
  state_->handle->wait();
  if (state_->allocated) return *state_->allocated;
  if (state_->original.defined()) {
    state_->original.copy_(state_->result);
    return state_->original;
  }
  return state_->result;
}

// --- the job ------------------------------------------------------------------------------------

void init() {
  std::lock_guard lock(engine_mutex);
  if (the_engine) return;
  the_engine = std::make_unique<hora::Engine>(Communicator::fromEnvironment(), EngineOptions::fromEnvironment());
  // A program that returns or exits without shutdown() must not leave the engine to the
  // library's static destructors: they run after the atexit handlers, among them OpenSSL's
  // cleanup, and the engine's goodbye to its peers needs OpenSSL (the heartbeat's HMAC).
  // Handlers run in reverse order of registration, and OpenSSL registered its own while the
  // engine was made, so this one runs first.
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit([] { shutdown(); }); });
}

void shutdown() {
  std::lock_guard lock(engine_mutex);
  the_engine.reset();
}

bool is_initialized() { return the_engine != nullptr; }

hora::Engine& engine() {
  if (!the_engine) throw InvalidArgumentError("hora has not been initialized; call hora::torch::init()");
  return *the_engine;
}

int rank() { return engine().identity().rank; }
int size() { return engine().identity().size; }
int local_rank() { return engine().identity().local_rank; }
int local_size() { return engine().identity().local_size; }
int cross_rank() { return engine().identity().cross_rank; }
int cross_size() { return engine().identity().cross_size; }

// --- collectives ----------------------------------------------------------------------------------

TensorHandle allreduce_async(const at::Tensor& tensor, const ReduceOptions& options) {
  Request r = requestFor(CollectiveKind::kAllreduce, tensor, options.name, options.process_set);
  r.reduce = reduceOptions(options);
  at::Tensor source = tensor.contiguous();
  return submit(std::move(r), source, at::empty_like(source));
}

at::Tensor allreduce(const at::Tensor& tensor, const ReduceOptions& options) {
  return allreduce_async(tensor, options).wait();
}

TensorHandle allreduce_async_(at::Tensor& tensor, const ReduceOptions& options) {
  Request r = requestFor(CollectiveKind::kAllreduce, tensor, options.name, options.process_set);
  r.reduce = reduceOptions(options);
  if (tensor.is_contiguous()) return submit(std::move(r), tensor, tensor);
  at::Tensor buffer = tensor.contiguous();
  return submit(std::move(r), buffer, buffer, tensor);
}

at::Tensor& allreduce_(at::Tensor& tensor, const ReduceOptions& options) {
  allreduce_async_(tensor, options).wait();
  return tensor;
}

TensorHandle allgather_async(const at::Tensor& tensor, const CollectiveOptions& options) {
  if (tensor.dim() == 0) throw InvalidArgumentError("allgather: the tensor needs at least one dimension");
  Request r = requestFor(CollectiveKind::kAllgather, tensor, options.name, options.process_set);
  return submit(std::move(r), tensor.contiguous(), {});
}

at::Tensor allgather(const at::Tensor& tensor, const CollectiveOptions& options) {
  return allgather_async(tensor, options).wait();
}

TensorHandle broadcast_async(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  Request r = requestFor(CollectiveKind::kBroadcast, tensor, options.name, options.process_set);
  r.root = root_rank;
  at::Tensor source = tensor.contiguous();
  return submit(std::move(r), source, at::empty_like(source));
}

at::Tensor broadcast(const at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  return broadcast_async(tensor, root_rank, options).wait();
}

TensorHandle broadcast_async_(at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  Request r = requestFor(CollectiveKind::kBroadcast, tensor, options.name, options.process_set);
  r.root = root_rank;
  if (tensor.is_contiguous()) return submit(std::move(r), tensor, tensor);
  at::Tensor buffer = tensor.contiguous();
  return submit(std::move(r), buffer, buffer, tensor);
}

at::Tensor& broadcast_(at::Tensor& tensor, int root_rank, const CollectiveOptions& options) {
  broadcast_async_(tensor, root_rank, options).wait();
  return tensor;
}

TensorHandle alltoall_async(const at::Tensor& tensor, const std::vector<int64_t>& splits,
                            const CollectiveOptions& options) {
  if (tensor.dim() == 0) throw InvalidArgumentError("alltoall: the tensor needs at least one dimension");
  Request r = requestFor(CollectiveKind::kAlltoall, tensor, options.name, options.process_set);
  r.splits = splits;
  return submit(std::move(r), tensor.contiguous(), {});
}

at::Tensor alltoall(const at::Tensor& tensor, const std::vector<int64_t>& splits, const CollectiveOptions& options) {
  return alltoall_async(tensor, splits, options).wait();
}

TensorHandle reducescatter_async(const at::Tensor& tensor, const ReduceOptions& options) {
  if (tensor.dim() == 0) throw InvalidArgumentError("reducescatter: the tensor needs at least one dimension");
  Request r = requestFor(CollectiveKind::kReducescatter, tensor, options.name, options.process_set);
  r.reduce = reduceOptions(options);
  return submit(std::move(r), tensor.contiguous(), {});
}

at::Tensor reducescatter(const at::Tensor& tensor, const ReduceOptions& options) {
  return reducescatter_async(tensor, options).wait();
}

int join(int process_set) {
  int32_t last = -1;
  engine().join(&last, process_set).wait();
  return last;
}

void barrier(int process_set) { engine().barrier(process_set).wait(); }

int add_process_set(std::vector<int> ranks) { return engine().addProcessSet(std::move(ranks)); }
void remove_process_set(int process_set) { engine().removeProcessSet(process_set); }

void start_timeline(const std::string& path, bool mark_cycles) { engine().startTimeline(path, mark_cycles); }
void stop_timeline() { engine().stopTimeline(); }

}  // namespace hora::torch
