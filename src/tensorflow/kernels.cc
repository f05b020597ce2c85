// The kernels of hora's TensorFlow ops (op_defs.cc), on the CPU, through TensorFlow's C API.
// The collectives are asynchronous kernels (Note [asynchronous kernels] in call.h): each turns
// its inputs into engine requests and returns; the engine thread allocates the outputs whose
// shape negotiation decides and completes the op. The topology ops (rank, size, ...) answer at
// once.
#include <tensorflow/c/kernels.h>
#include <tensorflow/c/tf_tensor.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hora/types.h"
#include "tensorflow/call.h"
#include "tensorflow/engine_link.h"
#include "tensorflow/op_defs.h"

namespace hora::tf {
namespace {

constexpr const char* kNotInitialized = "hora has not been initialized; call hvd.init()";

// What a kernel reads from its attrs, once, when TensorFlow constructs it.
struct Kernel {
  int kind = 0;          // a CollectiveKind, or a HORA_TOPOLOGY_* for the topology ops
  std::string name;      // the negotiation name
  int reduce_op = 0;
  float prescale = 1;
  float postscale = 1;
  int root_rank = 0;     // global, as Horovod's attr
  int process_set = 0;
};

std::string stringAttr(TF_OpKernelConstruction* c, const char* attr, TF_Status* status) {
  if (!TF_OpKernelConstruction_HasAttr(c, attr, status)) return "";
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(c, attr, &list_size, &total_size, status);
  if (TF_GetCode(status) != TF_OK || total_size <= 0) return "";
  std::string value(static_cast<size_t>(total_size), '\0');
  TF_OpKernelConstruction_GetAttrString(c, attr, value.data(), value.size(), status);
  return value;
}

template <typename T, typename Get>
T attrOr(TF_OpKernelConstruction* c, const char* attr, T fallback, Get get, TF_Status* status) {
  if (!TF_OpKernelConstruction_HasAttr(c, attr, status)) return fallback;
  T value = fallback;
  get(c, attr, &value, status);
  return value;
}

// The negotiation name: the tensor_name attr (a name given in eager mode), else the node's name,
// without its scopes when ignore_name_scope is set (Horovod's rule).
std::string negotiationName(TF_OpKernelConstruction* c, TF_Status* status) {
  std::string name = stringAttr(c, "tensor_name", status);
  if (!name.empty()) return name;
  const TF_StringView node = TF_OpKernelConstruction_GetName(c);
  name.assign(node.data, node.len);
  TF_Status* s = TF_NewStatus();
  const bool ignore_scope = attrOr<TF_Bool>(c, "ignore_name_scope", 0, TF_OpKernelConstruction_GetAttrBool, s);
  TF_DeleteStatus(s);
  if (ignore_scope) {
    const size_t slash = name.find_last_of('/');
    if (slash != std::string::npos) name = name.substr(slash + 1);
  }
  return name;
}

template <int Kind>
void* create(TF_OpKernelConstruction* c) {
  auto* k = new Kernel;
  k->kind = Kind;
  TF_Status* status = TF_NewStatus();
  k->name = negotiationName(c, status);
  k->reduce_op = attrOr<int32_t>(c, "reduce_op", 0, TF_OpKernelConstruction_GetAttrInt32, status);
  k->prescale = attrOr<float>(c, "prescale_factor", 1, TF_OpKernelConstruction_GetAttrFloat, status);
  k->postscale = attrOr<float>(c, "postscale_factor", 1, TF_OpKernelConstruction_GetAttrFloat, status);
  k->root_rank = attrOr<int32_t>(c, "root_rank", 0, TF_OpKernelConstruction_GetAttrInt32, status);
  k->process_set = attrOr<int32_t>(c, "process_set_id", 0, TF_OpKernelConstruction_GetAttrInt32, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(c, status);
  TF_DeleteStatus(status);
  return k;
}

void destroy(void* kernel) { delete static_cast<Kernel*>(kernel); }

std::vector<int64_t> shapeOf(const TF_Tensor* t) {
  std::vector<int64_t> shape(static_cast<size_t>(TF_NumDims(t)));
  for (size_t d = 0; d < shape.size(); ++d) shape[d] = TF_Dim(t, static_cast<int>(d));
  return shape;
}

// The name of input i's request: the op's name, numbered in the grouped ops.
std::string partName(const Kernel& k, int i, int n) {
  return n == 1 ? k.name : k.name + "." + std::to_string(i) + "of" + std::to_string(n);
}

// A request reading input i; outputs that keep the input's shape are allocated now (into the
// input's buffer when TensorFlow allows: the engine reduces in place), the others by the engine.
Call::Part* addInput(Call& call, const Kernel& k, int i, int n, bool same_shape_output) {
  TF_Tensor* in = call.input(i);
  if (!in) return nullptr;
  const TF_DataType type = TF_TensorType(in);
  const int hora_type = horaTypeOf(type);
  if (hora_type < 0) {  // the ops' type lists admit only hora's types; this would be a bug there
    call.fail(TF_INVALID_ARGUMENT, k.name + ": hora does not handle the tensor's type");
    return nullptr;
  }
  Call::Part& p = call.addPart(i, type, partName(k, i, n));
  p.shape = shapeOf(in);
  p.request.dtype = hora_type;
  p.request.input = TF_TensorData(in);
  p.request.reduce_op = k.reduce_op;
  p.request.prescale = k.prescale;
  p.request.postscale = k.postscale;
  p.request.process_set = k.process_set;
  if (same_shape_output) {
    TF_Status* status = TF_NewStatus();
    int forwarded = -1;
    TF_Tensor* out = TF_ForwardInputOrAllocateOutput(call.context(), &i, 1, i, p.shape.data(),
                                                     static_cast<int>(p.shape.size()), &forwarded, status);
    if (TF_GetCode(status) != TF_OK) call.fail(TF_GetCode(status), TF_Message(status));
    TF_DeleteStatus(status);
    if (!out) return nullptr;
    call.keep(out);
    // An empty tensor has no buffer; the engine moves nothing for it, but wants a pointer.
    static std::byte nothing[1];
    p.request.output = TF_TensorByteSize(out) ? TF_TensorData(out) : nothing;
    if (!TF_TensorByteSize(out)) p.request.input = nothing;
  }
  return &p;
}

// Alltoall: the data, and a second request of this rank's counts, one to each member, from
// which each rank learns what it received (received_splits).
void prepareAlltoall(Call& call, const Kernel& k) {
  Call::Part* data = addInput(call, k, 0, 1, false);
  TF_Tensor* splits = call.input(1);
  if (!data || !splits) return;
  data->request.op = static_cast<int>(CollectiveKind::kAlltoall);
  const int members = engine()->topology(HORA_TOPOLOGY_SET_SIZE, k.process_set);
  if (members <= 0) return call.fail(TF_INVALID_ARGUMENT, k.name + ": unknown process set " + std::to_string(k.process_set));
  if (data->shape.empty()) return call.fail(TF_INVALID_ARGUMENT, k.name + ": alltoall needs a tensor of at least one dimension");
  const int64_t rows = data->shape[0];
  const auto* given = static_cast<const int32_t*>(TF_TensorData(splits));
  const int64_t count = TF_NumDims(splits) == 0 ? 1 : TF_Dim(splits, 0);
  if (count == 0) {
    if (rows % members)
      return call.fail(TF_INVALID_ARGUMENT, k.name + ": splits not given, but the first dimension (" +
                                                std::to_string(rows) + ") is not a multiple of the number of ranks (" +
                                                std::to_string(members) + ")");
    data->splits.assign(static_cast<size_t>(members), rows / members);
  } else {
    if (count != members)
      return call.fail(TF_INVALID_ARGUMENT, k.name + ": splits has " + std::to_string(count) + " entries for " +
                                                std::to_string(members) + " ranks");
    int64_t sum = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (given[i] < 0) return call.fail(TF_INVALID_ARGUMENT, k.name + ": splits must not be negative");
      data->splits.push_back(given[i]);
      sum += given[i];
    }
    if (sum > rows)
      return call.fail(TF_INVALID_ARGUMENT, k.name + ": the splits sum to " + std::to_string(sum) +
                                                ", more than the first dimension (" + std::to_string(rows) + ")");
    data->shape[0] = sum;  // rows beyond the splits' sum are not sent
  }
  Call::Part& counts = call.addPart(1, TF_INT32, k.name + ".received_splits");
  counts.local.assign(data->splits.begin(), data->splits.end());
  counts.shape = {members};
  counts.splits.assign(static_cast<size_t>(members), 1);
  counts.request.op = static_cast<int>(CollectiveKind::kAlltoall);
  counts.request.dtype = HORA_INT32;
  counts.request.input = counts.local.data();
  counts.request.process_set = k.process_set;
}

void prepareJoin(Call& call, const Kernel& k) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor* out = TF_AllocateOutput(call.context(), 0, TF_INT32, nullptr, 0, sizeof(int32_t), status);
  if (TF_GetCode(status) != TF_OK) call.fail(TF_GetCode(status), TF_Message(status));
  TF_DeleteStatus(status);
  if (!out) return;
  call.keep(out);
  Call::Part& p = call.addPart(0, TF_INT32, "hora.join");
  p.request.op = static_cast<int>(CollectiveKind::kJoin);
  p.request.dtype = HORA_INT32;
  p.request.output = TF_TensorData(out);
  p.request.process_set = k.process_set;
}

template <int Kind>
void computeAsync(void* kernel, TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done) {
  const Kernel& k = *static_cast<Kernel*>(kernel);
  auto* call = new Call(ctx, done);
  const hora_engine_access* e = engine();
  if (!e || e->topology(HORA_TOPOLOGY_INITIALIZED, 0) != 1) {
    call->fail(TF_FAILED_PRECONDITION, kNotInitialized);
  } else if (Kind == static_cast<int>(CollectiveKind::kAlltoall)) {
    prepareAlltoall(*call, k);
  } else if (Kind == static_cast<int>(CollectiveKind::kJoin)) {
    prepareJoin(*call, k);
  } else {
    const bool same_shape = Kind == static_cast<int>(CollectiveKind::kAllreduce) ||
                            Kind == static_cast<int>(CollectiveKind::kBroadcast);
    int root = 0;
    if (Kind == static_cast<int>(CollectiveKind::kBroadcast)) {
      root = e->member_index(k.process_set, k.root_rank);
      if (root < 0)
        call->fail(TF_INVALID_ARGUMENT, k.name + ": root_rank " + std::to_string(k.root_rank) +
                                            " is not a rank of process set " + std::to_string(k.process_set));
    }
    const int n = TF_NumInputs(ctx);
    for (int i = 0; i < n && !call->failed(); ++i) {
      if (Call::Part* p = addInput(*call, k, i, n, same_shape)) {
        p->request.op = Kind;
        p->request.root = root;
        if (Kind == static_cast<int>(CollectiveKind::kReducescatter) && p->shape.empty())
          call->fail(TF_FAILED_PRECONDITION, p->name + ": a rank-zero (scalar) tensor cannot be reduce-scattered; "
                                                       "give it at least one dimension");
      }
    }
  }
  call->start();
}

// rank_op, size_op, ...: the engine's answer at run time.
template <int What>
void computeTopology(void* kernel, TF_OpKernelContext* ctx) {
  const Kernel& k = *static_cast<Kernel*>(kernel);
  const hora_engine_access* e = engine();
  TF_Status* status = TF_NewStatus();
  int value = e ? e->topology(What, k.process_set) : HORA_TOPOLOGY_ERROR_INIT;
  // process_set_included_op answers its errors as values, as Horovod's; the others raise them.
  if (What != HORA_TOPOLOGY_SET_INCLUDED && value == HORA_TOPOLOGY_ERROR_INIT) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, kNotInitialized);
  } else if (What != HORA_TOPOLOGY_SET_INCLUDED && value == HORA_TOPOLOGY_ERROR_UNKNOWN_SET) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, ("unknown process set " + std::to_string(k.process_set)).c_str());
  } else if (TF_Tensor* out = TF_AllocateOutput(ctx, 0, TF_INT32, nullptr, 0, sizeof(int32_t), status)) {
    *static_cast<int32_t*>(TF_TensorData(out)) = value;
    TF_DeleteTensor(out);
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
}

void registerKernel(const char* op, TF_KernelBuilder* builder) {
  TF_Status* status = TF_NewStatus();
  TF_RegisterKernelBuilder((std::string(op) + "Op").c_str(), builder, status);
  if (TF_GetCode(status) != TF_OK) {  // TensorFlow refused a kernel of an op defined above: a bug
    std::fprintf(stderr, "hora: cannot register the TensorFlow kernel of %s: %s\n", op, TF_Message(status));
    std::abort();
  }
  TF_DeleteStatus(status);
}

template <CollectiveKind Kind>
void collective(const char* op) {
  constexpr int kind = static_cast<int>(Kind);
  registerKernel(op, TF_NewAsyncKernelBuilder(op, "CPU", &create<kind>, &computeAsync<kind>, &destroy));
}

template <int What>
void topology(const char* op) {
  registerKernel(op, TF_NewKernelBuilder(op, "CPU", &create<What>, &computeTopology<What>, &destroy));
}

// Runs when tf.load_op_library loads this library.
struct Registration {
  Registration() {
    defineOps();
    collective<CollectiveKind::kAllreduce>("HoraAllreduce");
    collective<CollectiveKind::kAllreduce>("HoraGroupedAllreduce");
    collective<CollectiveKind::kAllgather>("HoraAllgather");
    collective<CollectiveKind::kAllgather>("HoraGroupedAllgather");
    collective<CollectiveKind::kBroadcast>("HoraBroadcast");
    collective<CollectiveKind::kAlltoall>("HoraAlltoall");
    collective<CollectiveKind::kReducescatter>("HoraReducescatter");
    collective<CollectiveKind::kReducescatter>("HoraGroupedReducescatter");
    collective<CollectiveKind::kJoin>("HoraJoin");
    topology<HORA_TOPOLOGY_SET_SIZE>("HoraSize");
    topology<HORA_TOPOLOGY_LOCAL_SIZE>("HoraLocalSize");
    topology<HORA_TOPOLOGY_RANK>("HoraRank");
    topology<HORA_TOPOLOGY_LOCAL_RANK>("HoraLocalRank");
    topology<HORA_TOPOLOGY_SET_INCLUDED>("HoraProcessSetIncluded");
  }
} registration;

}  // namespace
}  // namespace hora::tf
