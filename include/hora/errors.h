// Typed errors thrown across hora's public boundary.
//
// Every error is a hora::Error (a std::runtime_error) whose what() is a complete sentence for a
// person: it names the operation, and where it applies the argument, the peer rank and address,
// the deadline or the ranks that disagree. Subclasses let programs react by kind; the C ABI maps
// each to a hora_status value one to one.
//
// A Communicator that threw a PeerError or TimeoutError is broken: every later call rethrows the
// same error (see Communicator).
#pragma once

#include <stdexcept>
#include <string>

#include "hora/export.h"

namespace hora {

enum class ErrorKind {
  kInvalidArgument,  // the caller passed something wrong; nothing was sent
  kTimeout,          // a deadline passed while waiting on a peer or the store
  kPeer,             // a peer closed its connection, sent garbage or failed
  kMismatch,         // ranks called collectives that do not agree (counts, op, order)
  kAuthentication,   // a connection could not prove the job secret
  kShutdown,         // the communicator was shut down
  kInternal,         // a bug or a system call failing in an unexpected way
  kRemoved,          // an elastic job's driver removed this worker (its host left or was blacklisted)
};

class HORA_API Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

class HORA_API InvalidArgumentError : public Error {
 public:
  explicit InvalidArgumentError(const std::string& m) : Error(ErrorKind::kInvalidArgument, m) {}
};
class HORA_API TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& m) : Error(ErrorKind::kTimeout, m) {}
};
class HORA_API PeerError : public Error {
 public:
  explicit PeerError(const std::string& m) : Error(ErrorKind::kPeer, m) {}
};
class HORA_API MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& m) : Error(ErrorKind::kMismatch, m) {}
};
class HORA_API AuthenticationError : public Error {
 public:
  explicit AuthenticationError(const std::string& m) : Error(ErrorKind::kAuthentication, m) {}
};
class HORA_API ShutdownError : public Error {
 public:
  explicit ShutdownError(const std::string& m) : Error(ErrorKind::kShutdown, m) {}
};
class HORA_API InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ErrorKind::kInternal, m) {}
};
// Not a failure of the job: the worker is not part of the elastic job's next generation and
// should exit (with code 0) rather than retry (docs/elastic.md).
class HORA_API WorkerRemovedError : public Error {
 public:
  explicit WorkerRemovedError(const std::string& m) : Error(ErrorKind::kRemoved, m) {}
};

// Rethrows `e` as its own concrete type (used to hand a stored error to a later caller).
[[noreturn]] HORA_API void rethrowAs(const Error& e);

}  // namespace hora
