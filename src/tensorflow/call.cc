#include "tensorflow/call.h"

#include <tensorflow/c/tf_tensor.h>

#include <algorithm>

#include "tensorflow/engine_link.h"

namespace hora::tf {

Call::Call(TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done)
    : ctx_(ctx), done_(std::move(*reinterpret_cast<std::function<void()>*>(done))) {}  // Note [asynchronous kernels]

Call::~Call() {
  for (TF_Tensor* t : tensors_) TF_DeleteTensor(t);
}

TF_Tensor* Call::input(int i) {
  TF_Tensor* t = nullptr;
  TF_Status* status = TF_NewStatus();
  TF_GetInput(ctx_, i, &t, status);
  if (TF_GetCode(status) != TF_OK) fail(TF_GetCode(status), TF_Message(status));
  TF_DeleteStatus(status);
  if (t) keep(t);
  return t;
}

Call::Part& Call::addPart(int output_index, TF_DataType type, std::string name) {
  auto part = std::make_unique<Part>();
  part->call = this;
  part->output_index = output_index;
  part->type = type;
  part->name = std::move(name);
  parts_.push_back(std::move(part));
  return *parts_.back();
}

void Call::keep(TF_Tensor* t) {
  std::lock_guard lock(mutex_);
  tensors_.push_back(t);
}

void Call::fail(TF_Code code, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (code_ == TF_OK) {
    code_ = code;
    message_ = message;
  }
}

bool Call::failed() const {
  std::lock_guard lock(mutex_);
  return code_ != TF_OK;
}

void Call::start() {
  if (!failed()) {
    const hora_engine_access* e = engine();
    pending_ += static_cast<int>(parts_.size());
    for (auto& p : parts_) {
      hora_engine_request& r = p->request;
      r.name = p->name.c_str();
      r.shape = p->shape.data();
      r.ndims = static_cast<int>(p->shape.size());
      if (!p->splits.empty()) {
        r.splits = p->splits.data();
        r.nsplits = static_cast<int>(p->splits.size());
      }
      e->enqueue(&r, p.get(), r.output ? nullptr : &Call::allocate, &Call::completed);
    }
  }
  release();
}

void Call::release() {
  if (--pending_ > 0) return;
  if (code_ != TF_OK) {  // every request has completed: no other thread touches the Call now
    TF_Status* status = TF_NewStatus();
    TF_SetStatus(status, code_, message_.c_str());
    TF_OpKernelContext_Failure(ctx_, status);
    TF_DeleteStatus(status);
  }
  std::function<void()> done = std::move(done_);
  delete this;  // before done: TensorFlow may free the kernel's context once it has run
  done();
}

void* Call::allocate(void* p, const int64_t* shape, int ndims) {
  auto* part = static_cast<Part*>(p);
  Call* call = part->call;
  int64_t elements = 1;
  for (int i = 0; i < ndims; ++i) elements *= shape[i];
  const size_t bytes = static_cast<size_t>(elements) * TF_DataTypeSize(part->type);
  TF_Status* status = TF_NewStatus();
  TF_Tensor* t = TF_AllocateOutput(call->ctx_, part->output_index, part->type, shape, ndims, bytes, status);
  void* data = nullptr;
  if (TF_GetCode(status) == TF_OK && t) {
    call->keep(t);
    data = TF_TensorData(t);
  } else {
    // The collective goes on (the other ranks wait for this one) into scratch memory; the op
    // then fails with TensorFlow's reason.
    call->fail(TF_GetCode(status) == TF_OK ? TF_RESOURCE_EXHAUSTED : TF_GetCode(status),
               std::string("cannot allocate the output of ") + part->name + ": " + TF_Message(status));
  }
  TF_DeleteStatus(status);
  if (data == nullptr) {  // a failed allocation, or an empty output (TensorFlow gives no buffer)
    part->scratch.resize(std::max<size_t>(bytes, 1));
    data = part->scratch.data();
  }
  return data;
}

void Call::completed(void* p, hora_status status, const char* message) {
  auto* part = static_cast<Part*>(p);
  if (status != HORA_OK) part->call->fail(codeOf(status), message);
  part->call->release();
}

}  // namespace hora::tf
