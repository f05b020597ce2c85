// Handle::State: the completion of one request, shared by the engine thread (which completes
// it) and user threads (which poll or wait), and the Doorbell through which a waiting thread
// wakes the engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/socket.h"
#include "common/thread_annotations.h"
#include "hora/engine.h"
#include "hora/errors.h"

namespace hora {

namespace engine {
// The engine thread's eventfd. Handles share it, so that a thread that waits for (or polls) a
// request the engine holds back (Note [buckets]) can wake the engine; it outlives the Runtime.
class Doorbell {
 public:
  Doorbell();
  int fd() const { return fd_.get(); }
  void ring();
  // Requests are queued but held back; the next wait or poll on any handle rings.
  void hold() { held_.store(true, std::memory_order_release); }
  void release() { held_.store(false, std::memory_order_relaxed); }
  bool held() const { return held_.load(std::memory_order_acquire); }
  void ringIfHeld() {
    if (held_.load(std::memory_order_acquire) && held_.exchange(false)) ring();
  }

 private:
  common::Fd fd_;
  std::atomic<bool> held_{false};
};
}  // namespace engine

// The completion of one request. The error is kept as kind and text, and every reader makes
// its own exception from them: an exception object shared between the engine thread and user
// threads would be released by whichever finishes last, outside any lock.
struct Handle::State {
  common::Mutex mutex;
  std::condition_variable cv;
  bool done HORA_GUARDED_BY(mutex) = false;
  std::optional<Error> failure HORA_GUARDED_BY(mutex);
  std::vector<int64_t> output_shape HORA_GUARDED_BY(mutex);
  std::function<void(std::exception_ptr)> callback;
  std::shared_ptr<engine::Doorbell> doorbell;  // null for handles that failed at enqueue
  void complete(std::exception_ptr e, std::vector<int64_t> shape = {});
};

namespace engine {

// A handle that has already failed with `e` (after running `done`).
Handle failedHandle(std::exception_ptr e, std::function<void(std::exception_ptr)> done = {});

}  // namespace engine
}  // namespace hora
