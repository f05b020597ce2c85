// Clang's thread-safety annotations, checked by `clang -Wthread-safety` (scripts/test.sh's
// thread-safety step), and a mutex they understand. Under gcc the macros are empty.
//
// libstdc++'s std::mutex carries no capability attribute, so annotated state is guarded by
// common::Mutex, a std::mutex under another name (same size, same calls, nothing added), and
// locked by common::MutexLock, a std::unique_lock the analysis sees. A condition variable
// waits on MutexLock::native(); the analysis takes the lock as held across the wait, which is
// what the code after the wait may assume.
#pragma once

#include <mutex>

#if defined(__clang__)
#define HORA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HORA_THREAD_ANNOTATION(x)
#endif

#define HORA_CAPABILITY(name) HORA_THREAD_ANNOTATION(capability(name))
#define HORA_SCOPED_CAPABILITY HORA_THREAD_ANNOTATION(scoped_lockable)
// The member may be read or written only with `mutex` held.
#define HORA_GUARDED_BY(mutex) HORA_THREAD_ANNOTATION(guarded_by(mutex))
// What the pointer points at may be touched only with `mutex` held.
#define HORA_PT_GUARDED_BY(mutex) HORA_THREAD_ANNOTATION(pt_guarded_by(mutex))
// The caller must hold (REQUIRES) or must not hold (EXCLUDES) the mutexes.
#define HORA_REQUIRES(...) HORA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define HORA_EXCLUDES(...) HORA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define HORA_ACQUIRE(...) HORA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define HORA_RELEASE(...) HORA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// For a function whose locking the analysis cannot follow; a comment must say why.
#define HORA_NO_THREAD_SAFETY_ANALYSIS HORA_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace hora::common {

class HORA_CAPABILITY("mutex") Mutex {
 public:
  void lock() HORA_ACQUIRE() { mutex_.lock(); }
  void unlock() HORA_RELEASE() { mutex_.unlock(); }
  std::mutex& native() { return mutex_; }

 private:
  std::mutex mutex_;
};

// Holds `mutex` from construction to destruction (or unlock()).
class HORA_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) HORA_ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~MutexLock() HORA_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Drops and takes the mutex again, for work done without it.
  void unlock() HORA_RELEASE() { lock_.unlock(); }
  void lock() HORA_ACQUIRE() { lock_.lock(); }
  // For std::condition_variable::wait and wait_until.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace hora::common
