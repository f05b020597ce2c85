#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "hora/errors.h"

namespace hora::common {
namespace {

std::string errnoText(int err) { return std::string(std::strerror(err)); }

[[noreturn]] void throwTimeout(const std::string& action, const std::string& what,
                               const Deadline& deadline) {
  throw TimeoutError("timed out after " + std::to_string(deadline.timeout().count()) + " ms " +
                     action + " " + what);
}

// Waits for `events` on fd; returns false on deadline.
bool waitFor(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) throw InternalError("poll failed: " + errnoText(errno));
  }
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

sockaddr_in resolveIpv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    throw InvalidArgumentError("cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return addr;
}

std::string interfaceAddress(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw InternalError("getifaddrs failed: " + errnoText(errno));
  std::string found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && iface == i->ifa_name) {
      char text[INET_ADDRSTRLEN];
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                  sizeof(text));
      found = text;
      break;
    }
  }
  ::freeifaddrs(list);
  if (found.empty())
    throw InvalidArgumentError("HORA_IFACE: network interface '" + iface +
                               "' does not exist or has no IPv4 address");
  return found;
}

void setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void setBufferSizes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

Fd listenTcp(const std::string& host, int port, int backlog) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw InternalError("socket failed: " + errnoText(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = resolveIpv4(host, port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw InvalidArgumentError("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                               errnoText(errno));
  if (::listen(fd.get(), backlog) != 0) throw InternalError("listen failed: " + errnoText(errno));
  setNonBlocking(fd.get());
  return fd;
}

static SocketAddress toAddress(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
  return {text, ntohs(a.sin_port)};
}

SocketAddress localAddress(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return toAddress(a);
}

SocketAddress peerAddress(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return toAddress(a);
}

Fd connectTcp(const std::string& host, int port, const Deadline& deadline,
              const std::string& what) {
  const sockaddr_in addr = resolveIpv4(host, port);
  std::string last_error = "no attempt";
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) throw InternalError("socket failed: " + errnoText(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      if (!waitFor(fd.get(), POLLOUT, deadline)) break;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      setNoDelay(fd.get());
      return fd;
    }
    last_error = errnoText(errno);
    // Refused: the peer is not listening yet. Retry with a growing pause, up to the deadline.
    if (deadline.remaining() <= backoff) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
  throw TimeoutError("timed out after " + std::to_string(deadline.timeout().count()) +
                     " ms connecting to " + what + " at " + host + ":" + std::to_string(port) +
                     " (last error: " + last_error + ")");
}

Fd acceptTcp(int listen_fd, const Deadline& deadline, const std::string& what) {
  while (true) {
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) {
      setNoDelay(fd.get());
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      throw InternalError("accept failed: " + errnoText(errno));
    if (!waitFor(listen_fd, POLLIN, deadline)) throwTimeout("waiting for", what, deadline);
  }
}

void readFull(int fd, void* data, size_t n, const Deadline& deadline, const std::string& what) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw PeerError(what + " closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      throw PeerError("reading from " + what + " failed: " + errnoText(errno));
    if (!waitFor(fd, POLLIN, deadline)) throwTimeout("reading from", what, deadline);
  }
}

void writeFull(int fd, const void* data, size_t n, const Deadline& deadline,
               const std::string& what) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r >= 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      throw PeerError("writing to " + what + " failed: " + errnoText(errno));
    if (!waitFor(fd, POLLOUT, deadline)) throwTimeout("writing to", what, deadline);
  }
}

}  // namespace hora::common
