// One execution of an asynchronous hora kernel: the requests it enqueued, the tensors they read
// and write, and TensorFlow's done callback, which runs (on the engine thread) when the last
// request completes. Nothing here waits: the kernel returns to TensorFlow as soon as it has
// enqueued, so its inter-op thread runs other ops meanwhile (Note [asynchronous kernels]).
#pragma once

#include <tensorflow/c/kernels.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hora/engine_access.h"

namespace hora::tf {

// Note [asynchronous kernels]: TF_NewAsyncKernelBuilder gives the kernel a TF_AsyncOpKernelDoneCallback*, which points at
// the std::function<void()> that TensorFlow's CAsyncOpKernel::ComputeAsync received by value
// (tensorflow/c/kernels.cc, in 2.15 as in 2.21): it dies when ComputeAsync returns, so the C
// API by itself lets a kernel finish only before returning. A kernel that completes later must
// own that callback, so Call's constructor moves it out. This is the one thing this library
// relies on beyond the C API's declarations; tests/tensorflow runs it under every TensorFlow
// version scripts/setup.sh installs.
class Call {
 public:
  // One engine request: its input, the output it fills, and what the engine needs.
  struct Part {
    Call* call = nullptr;
    int output_index = 0;      // which output of the op this request fills
    TF_DataType type = TF_FLOAT;
    hora_engine_request request{};
    std::string name;
    std::vector<int64_t> shape;
    std::vector<int64_t> splits;  // alltoall
    std::vector<int32_t> local;   // data the kernel made itself (alltoall's counts)
    std::vector<std::byte> scratch;  // where an output goes when TensorFlow could not allocate it
  };

  Call(TF_OpKernelContext* ctx, TF_AsyncOpKernelDoneCallback* done);
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  TF_OpKernelContext* context() const { return ctx_; }
  // The kernel's input i; the Call keeps it alive until done.
  TF_Tensor* input(int i);
  // A Part for a request; parts stay where they are until done.
  Part& addPart(int output_index, TF_DataType type, std::string name);
  // Keeps a tensor (an output the kernel allocated) alive until done.
  void keep(TF_Tensor* t);

  // Records a failure (the first one is reported).
  void fail(TF_Code code, const std::string& message);
  bool failed() const;
  // Enqueues every part, unless the preparation failed; done runs when all have completed.
  // The Call deletes itself: it must not be touched after start().
  void start();

 private:
  ~Call();
  void release();
  static void* allocate(void* part, const int64_t* shape, int ndims);
  static void completed(void* part, hora_status status, const char* message);

  TF_OpKernelContext* ctx_;
  std::function<void()> done_;
  std::vector<TF_Tensor*> tensors_;
  std::vector<std::unique_ptr<Part>> parts_;
  std::atomic<int> pending_{1};  // the requests in flight, plus start()'s own hold
  mutable std::mutex mutex_;
  TF_Code code_ = TF_OK;
  std::string message_;
};

}  // namespace hora::tf
