// Thin RAII and deadline-aware helpers over POSIX TCP sockets, shared by the rendezvous store and
// the TCP transport. Every blocking helper takes a Deadline and throws TimeoutError when it passes,
// PeerError when the other side closes or resets; `what` names the other side in messages.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <string>
#include <utility>

#include "common/deadline.h"

namespace hora::common {

// Owns a file descriptor; move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) { reset(); fd_ = std::exchange(o.fd_, -1); }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

struct SocketAddress {
  std::string host;  // numeric IPv4
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// Resolves "host" (name or dotted quad) to IPv4. Throws InvalidArgumentError.
sockaddr_in resolveIpv4(const std::string& host, int port);
// IPv4 address of interface `iface` (e.g. "eth0"). Throws InvalidArgumentError naming it.
std::string interfaceAddress(const std::string& iface);

// A non-blocking listening socket on host:port (port 0 = any).
Fd listenTcp(const std::string& host, int port, int backlog = 128);
SocketAddress localAddress(int fd);
SocketAddress peerAddress(int fd);

// Connects with retries until the deadline (the peer may not listen yet). The returned socket is
// non-blocking with TCP_NODELAY.
Fd connectTcp(const std::string& host, int port, const Deadline& deadline, const std::string& what);
// Accepts one connection, waiting until the deadline. Non-blocking, TCP_NODELAY.
Fd acceptTcp(int listen_fd, const Deadline& deadline, const std::string& what);

void setNonBlocking(int fd);
void setNoDelay(int fd);
void setBufferSizes(int fd, int bytes);

// Read/write exactly n bytes on a non-blocking socket, polling until the deadline.
void readFull(int fd, void* data, size_t n, const Deadline& deadline, const std::string& what);
void writeFull(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& what);

}  // namespace hora::common
