#include "engine/handle.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/cpu_share.h"

namespace hora {

namespace {

std::optional<Error> errorOf(std::exception_ptr e) {
  if (!e) return std::nullopt;
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return Error(err.kind(), err.what());
  } catch (const std::exception& err) {
    return Error(ErrorKind::kInternal, err.what());
  }
}

std::exception_ptr freshException(const std::optional<Error>& failure) {
  if (!failure) return nullptr;
  try {
    rethrowAs(*failure);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

void Handle::State::complete(std::exception_ptr e, std::vector<int64_t> shape) {
  std::function<void(std::exception_ptr)> cb;
  std::optional<Error> f = errorOf(e);
  {
    common::MutexLock lock(mutex);
    failure = f;
    output_shape = std::move(shape);
    cb = std::move(callback);
  }
  if (cb) cb(freshException(f));  // before `done`: a waiter sees the callback's effects
  {
    common::MutexLock lock(mutex);
    done = true;
  }
  cv.notify_all();
}

bool Handle::poll() const {
  {
    common::MutexLock lock(state_->mutex);
    if (state_->done) return true;
  }
  if (state_->doorbell) state_->doorbell->ringIfHeld();  // someone wants it now: Note [buckets]
  return false;
}

void Handle::wait(std::chrono::milliseconds timeout) const {
  common::MutexLock lock(state_->mutex);
  if (!state_->done) {
    if (state_->doorbell) state_->doorbell->ringIfHeld();
    // While this thread waits its core is free for hora's threads (Note [who may spin]).
    common::CpuShare::FrontendWait blocked;
    if (!state_->cv.wait_for(lock.native(), timeout, [&]() HORA_REQUIRES(state_->mutex) { return state_->done; }))
      throw TimeoutError("request did not complete within " + std::to_string(timeout.count()) + " ms");
  }
  if (state_->failure) rethrowAs(*state_->failure);
}

std::exception_ptr Handle::error() const {
  common::MutexLock lock(state_->mutex);
  return freshException(state_->failure);
}

std::vector<int64_t> Handle::outputShape() const {
  common::MutexLock lock(state_->mutex);
  return state_->output_shape;
}

namespace engine {

Doorbell::Doorbell() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!fd_.valid()) throw InternalError(std::string("eventfd failed: ") + std::strerror(errno));
}

void Doorbell::ring() {
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_.get(), &one, sizeof(one));
}

Handle failedHandle(std::exception_ptr e, std::function<void(std::exception_ptr)> done) {
  auto state = std::make_shared<Handle::State>();
  state->callback = std::move(done);
  state->complete(e);
  return Handle(state);
}

}  // namespace engine
}  // namespace hora
