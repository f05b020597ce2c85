// The other candidate of docs/architecture.md section 10, for benchmarks/tensorflow/op_cost.py
// only: an allreduce op written against TensorFlow's C++ API (Horovod's way), compiled against
// one TensorFlow version by build_cxx_op.sh. It enqueues through the same engine table as the
// C API library (hora/engine_access.h), so the two differ only in how TensorFlow calls them.
#include "hora/engine_access.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

const hora_engine_access* table = nullptr;

struct Pending {
  tensorflow::OpKernelContext* ctx;
  tensorflow::AsyncOpKernel::DoneCallback done;
  std::vector<int64_t> shape;
  std::string name;
};

class CxxAllreduce : public tensorflow::AsyncOpKernel {
 public:
  explicit CxxAllreduce(tensorflow::OpKernelConstruction* c) : AsyncOpKernel(c) {}

  void ComputeAsync(tensorflow::OpKernelContext* ctx, DoneCallback done) override {
    const tensorflow::Tensor& in = ctx->input(0);
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out), done);
    auto* p = new Pending{ctx, std::move(done), {}, name()};
    for (int64_t d : in.shape().dim_sizes()) p->shape.push_back(d);
    hora_engine_request r{};
    r.name = p->name.c_str();
    r.dtype = HORA_FLOAT32;
    r.shape = p->shape.data();
    r.ndims = static_cast<int>(p->shape.size());
    r.input = in.data();
    r.output = out->data();
    r.reduce_op = HORA_SUM;
    r.prescale = r.postscale = 1.0;
    table->enqueue(&r, p, nullptr, [](void* c, hora_status status, const char* message) {
      auto* pending = static_cast<Pending*>(c);
      if (status != HORA_OK) pending->ctx->SetStatus(tensorflow::errors::Unknown(message));
      auto finish = std::move(pending->done);
      delete pending;
      finish();
    });
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int hora_attach_engine(const hora_engine_access* access) {
  table = access;
  return 0;
}

REGISTER_OP("HoraCxxAllreduce")
    .Attr("T: {float}")
    .Input("tensor: T")
    .Output("sum: T")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return tensorflow::OkStatus();
    });
REGISTER_KERNEL_BUILDER(Name("HoraCxxAllreduce").Device(tensorflow::DEVICE_CPU), CxxAllreduce);
