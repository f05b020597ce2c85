#include "rendezvous/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <list>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "rendezvous/wire.h"

namespace hora::rendezvous {

using Clock = std::chrono::steady_clock;

class TcpStoreServer::Loop {
 public:
  Loop(const std::string& host, int port, std::string secret)
      : secret_(std::move(secret)), listen_(common::listenTcp(host, port)),
        wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    port_ = common::localAddress(listen_.get()).port;
    thread_ = std::thread([this] { run(); });
  }

  ~Loop() {
    stop_.store(true);
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof(one));
    thread_.join();
  }

  int port() const { return port_; }
  int refused() const { return refused_.load(); }

 private:
  struct Client {
    common::Fd fd;
    std::string peer;
    common::Nonce challenge;
    uint64_t seq = 0;  // next request sequence number
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t out_sent = 0;
    // A parked get/wait: at most one per client, since clients wait for each response.
    std::optional<wire::Request> parked;
    Clock::time_point parked_deadline;
    bool closing = false;  // close once `out` is flushed
  };

  void run() {
    pthread_setname_np(pthread_self(), "hora-store");
    while (!stop_.load()) {
      std::vector<pollfd> fds{{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      for (auto& c : clients_) {
        short ev = c.closing ? 0 : POLLIN;
        if (c.out_sent < c.out.size()) ev |= POLLOUT;
        fds.push_back({c.fd.get(), ev, 0});
      }
      ::poll(fds.data(), fds.size(), nextTimeoutMs());
      if (fds[0].revents & POLLIN) acceptAll();
      size_t i = 2;
      for (auto& c : clients_) {
        if (i >= fds.size()) break;
        const short re = fds[i++].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
        if (re & POLLOUT) flush(c);
      }
      expireParked();
      // A set may have answered parked requests; their clients may have more queued.
      for (auto& c : clients_) processBuffered(c);
      clients_.remove_if([](const Client& c) {
        return !c.fd.valid() || (c.closing && c.out_sent >= c.out.size());
      });
    }
  }

  int nextTimeoutMs() const {
    auto next = Clock::now() + std::chrono::seconds(1);
    for (const auto& c : clients_)
      if (c.parked) next = std::min(next, c.parked_deadline);
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
    return static_cast<int>(std::max<long long>(ms, 0));
  }

  void acceptAll() {
    while (true) {
      common::Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) return;
      Client c;
      c.peer = common::peerAddress(fd.get()).str();
      c.fd = std::move(fd);
      c.challenge = common::randomNonce();
      const uint32_t magic = wire::kHelloMagic;
      auto* m = reinterpret_cast<const uint8_t*>(&magic);
      c.out.assign(m, m + 4);
      c.out.insert(c.out.end(), c.challenge.begin(), c.challenge.end());
      clients_.push_back(std::move(c));
      flush(clients_.back());
    }
  }

  void readFrom(Client& c) {
    uint8_t buf[64 * 1024];
    while (c.fd.valid() && !c.closing) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 && errno == EINTR) continue;
      c.fd.reset();  // closed or reset by the client
      return;
    }
    processBuffered(c);
  }

  void processBuffered(Client& c) {
    // Requests are answered one at a time: a client sends the next only after its response.
    while (!c.parked && !c.closing && c.fd.valid()) {
      auto result = wire::decodeRequest(c.in, secret_, c.challenge, c.seq);
      if (std::holds_alternative<wire::NeedMore>(result)) break;
      if (auto* refused = std::get_if<wire::Refused>(&result)) {
        refuse(c, refused->reason);
        break;
      }
      auto& decoded = std::get<wire::Decoded<wire::Request>>(result);
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(decoded.consumed));
      serve(c, std::move(decoded.message));
    }
  }

  void refuse(Client& c, const std::string& reason) {
    refused_.fetch_add(1);
    HORA_LOG(warn, "rendezvous store refused a request from {}: {}", c.peer, reason);
    // The refusal is tagged with the server's secret; a client with another secret cannot
    // verify it and reports an authentication failure, which is the truth.
    reply(c, {wire::Status::kError, 0, "request refused: " + reason});
    c.closing = true;
    c.in.clear();
  }

  void serve(Client& c, wire::Request req) {
    switch (req.op) {
      case wire::Op::kSet:
        data_[req.keys[0]] = std::move(req.value);
        reply(c, {wire::Status::kOk, 0, {}});
        wakeParked();
        return;
      case wire::Op::kAdd: {
        int64_t current = 0;
        auto it = data_.find(req.keys[0]);
        if (it != data_.end()) {
          if (it->second.size() != 8) {
            reply(c, {wire::Status::kError, 0, "key '" + req.keys[0] + "' holds no integer"});
            return;
          }
          std::memcpy(&current, it->second.data(), 8);
        }
        current += req.arg;
        data_[req.keys[0]] = std::string(reinterpret_cast<const char*>(&current), 8);
        reply(c, {wire::Status::kOk, current, {}});
        wakeParked();
        return;
      }
      case wire::Op::kTryGet: {
        auto it = data_.find(req.keys[0]);
        if (it == data_.end()) reply(c, {wire::Status::kNotFound, 0, {}});
        else reply(c, {wire::Status::kOk, 0, it->second});
        return;
      }
      case wire::Op::kGet:
      case wire::Op::kWait:
        c.parked_deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(req.arg, 0));
        c.parked = std::move(req);
        tryAnswerParked(c);
        return;
    }
  }

  // Answers a parked get/wait if its keys exist now; returns true when answered.
  bool tryAnswerParked(Client& c) {
    const wire::Request& req = *c.parked;
    for (const auto& k : req.keys)
      if (!data_.count(k)) return false;
    wire::Response r{wire::Status::kOk, 0, {}};
    if (req.op == wire::Op::kGet) r.value = data_[req.keys[0]];
    c.parked.reset();
    reply(c, r);
    return true;
  }

  void wakeParked() {
    for (auto& c : clients_)
      if (c.parked) tryAnswerParked(c);
  }

  void expireParked() {
    const auto now = Clock::now();
    for (auto& c : clients_) {
      if (!c.parked || c.parked_deadline > now) continue;
      std::string missing;
      for (const auto& k : c.parked->keys)
        if (!data_.count(k)) missing += (missing.empty() ? "" : ", ") + k;
      c.parked.reset();
      reply(c, {wire::Status::kTimeout, 0, missing});
    }
  }

  void reply(Client& c, const wire::Response& r) {
    auto frame = wire::encodeResponse(r, secret_, c.challenge, c.seq++);
    c.out.insert(c.out.end(), frame.begin(), frame.end());
    flush(c);
  }

  void flush(Client& c) {
    while (c.fd.valid() && c.out_sent < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent,
                               MSG_NOSIGNAL);
      if (n > 0) { c.out_sent += static_cast<size_t>(n); continue; }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.fd.reset();
      return;
    }
    c.out.clear();
    c.out_sent = 0;
  }

  const std::string secret_;
  common::Fd listen_;
  common::Fd wake_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::list<Client> clients_;  // only the loop thread touches clients_ and data_
  std::map<std::string, std::string> data_;
  std::thread thread_;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, std::string secret)
    : loop_(std::make_unique<Loop>(host, port, std::move(secret))) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return loop_->port(); }
int TcpStoreServer::refusedCount() const { return loop_->refused(); }

}  // namespace hora::rendezvous
