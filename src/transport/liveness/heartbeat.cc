#include "transport/liveness/heartbeat.h"

#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/crypto.h"
#include "common/logging.h"
#include "hora/errors.h"

namespace hora::transport {

namespace {

using Clock = common::Deadline::Clock;

constexpr uint32_t kMagic = 0x48424541;  // "HBEA"
constexpr std::string_view kMacLabel = "heartbeat";

// One beat on the wire; `mac` covers every field before it and the connection's key prefix.
struct Datagram {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  uint32_t from = 0;
  uint32_t reserved = 0;
  uint64_t sequence = 0;
  uint8_t mac[common::kMacBytes] = {};
};
constexpr size_t kSignedBytes = offsetof(Datagram, mac);

common::Mac macOf(const std::string& secret, const std::string& prefix, const Datagram& d) {
  const auto bytes = [](const void* p, size_t n) { return std::span<const uint8_t>(static_cast<const uint8_t*>(p), n); };
  return common::hmacSha256(secret, {bytes(kMacLabel.data(), kMacLabel.size()), bytes(prefix.data(), prefix.size()),
                                     bytes(&d, kSignedBytes)});
}

std::string seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

}  // namespace

Heartbeat::Heartbeat(const HeartbeatOptions& options, std::vector<int> sockets, std::vector<std::string> names,
                     std::shared_ptr<SilentPeers> silent, rendezvous::Store& store, const common::Deadline& deadline)
    : options_(options), period_(std::max(options.timeout / 6, std::chrono::milliseconds(1))),
      sockets_(std::move(sockets)), names_(std::move(names)), silent_(std::move(silent)),
      udp_(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)),
      stop_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), addresses_(static_cast<size_t>(options.size)),
      last_heard_(static_cast<size_t>(options.size)), last_sequence_(static_cast<size_t>(options.size), 0),
      gone_(static_cast<size_t>(options.size), false), worst_gap_(static_cast<size_t>(options.size), std::chrono::milliseconds(0)) {
  if (!udp_.valid() || !stop_.valid()) throw InternalError(std::string("heartbeat: socket failed: ") + std::strerror(errno));
  sockaddr_in here = common::resolveIpv4(options_.advertise_host, 0);
  if (::bind(udp_.get(), reinterpret_cast<const sockaddr*>(&here), sizeof(here)) != 0)
    throw InternalError("heartbeat: cannot bind " + options_.advertise_host + ": " + std::strerror(errno));
  socklen_t len = sizeof(here);
  ::getsockname(udp_.get(), reinterpret_cast<sockaddr*>(&here), &len);
  const std::string key = options_.key_prefix + "heartbeat/";
  store.set(key + std::to_string(options_.rank), options_.advertise_host + ":" + std::to_string(ntohs(here.sin_port)),
            deadline);
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) continue;
    const std::string address = store.get(key + std::to_string(r), deadline);
    const size_t colon = address.rfind(':');
    addresses_[static_cast<size_t>(r)] = common::resolveIpv4(address.substr(0, colon), std::stoi(address.substr(colon + 1)));
  }
}

Heartbeat::~Heartbeat() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_.get(), &one, sizeof(one));
  thread_.join();
  sendAll(Kind::kGoodbye);  // after the join: the beat thread's sendAll also numbers datagrams
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank)
      HORA_LOG(debug, "heartbeat: the longest silence of {} was {} ms", names_[static_cast<size_t>(r)],
               worst_gap_[static_cast<size_t>(r)].count());
  }
}

void Heartbeat::start() {
  const auto now = Clock::now();
  std::fill(last_heard_.begin(), last_heard_.end(), now);
  thread_ = std::thread([this] { loop(); });
}

void Heartbeat::loop() {
  ::pthread_setname_np(::pthread_self(), "hora-heartbeat");
  auto next_beat = Clock::now();
  while (true) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_beat - Clock::now());
    pollfd fds[2] = {{udp_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    if (n > 0 && fds[1].revents != 0) return;
    const auto now = Clock::now();
    readQueued(now);  // first: what arrived while this thread was not running counts
    if (now >= next_beat) {
      sendAll(Kind::kBeat);
      next_beat = now + period_;
    }
    judge(now);
  }
}

void Heartbeat::sendAll(Kind kind) {
  Datagram d;
  d.kind = static_cast<uint32_t>(kind);
  d.from = static_cast<uint32_t>(options_.rank);
  d.sequence = ++sequence_;
  const common::Mac mac = macOf(options_.secret, options_.key_prefix, d);
  std::memcpy(d.mac, mac.data(), mac.size());
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) continue;
    const sockaddr_in& to = addresses_[static_cast<size_t>(r)];
    // Best effort: a full buffer or an unreachable peer loses this beat, and silence judges it.
    [[maybe_unused]] auto sent = ::sendto(udp_.get(), &d, sizeof(d), MSG_DONTWAIT,
                                          reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }
}

void Heartbeat::readQueued(Clock::time_point now) {
  while (true) {
    Datagram d;
    const ssize_t n = ::recv(udp_.get(), &d, sizeof(d), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // nothing more queued
    if (n != static_cast<ssize_t>(sizeof(d)) || d.magic != kMagic || d.from >= static_cast<uint32_t>(options_.size) ||
        d.from == static_cast<uint32_t>(options_.rank))
      continue;  // not ours; a forged sender is caught by the MAC below
    if (!common::macEqual(macOf(options_.secret, options_.key_prefix, d), d.mac)) {
      HORA_LOG(warn, "heartbeat: dropped a datagram claiming to come from rank {} that fails the job secret's check",
               d.from);
      continue;
    }
    const size_t p = d.from;
    if (d.sequence <= last_sequence_[p]) continue;  // replayed or reordered
    last_sequence_[p] = d.sequence;
    worst_gap_[p] = std::max(worst_gap_[p], std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[p]));
    last_heard_[p] = now;
    if (d.kind == static_cast<uint32_t>(Kind::kGoodbye)) gone_[p] = true;
  }
}

void Heartbeat::judge(Clock::time_point now) {
  for (int r = 0; r < options_.size; ++r) {
    const size_t p = static_cast<size_t>(r);
    if (r == options_.rank || gone_[p] || now - last_heard_[p] <= options_.timeout) continue;
    gone_[p] = true;
    const auto silence = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_[p]);
    std::string verdict = names_[p] + " sent no heartbeat for " + seconds(silence) +
                          " (the limit, HORA_HEARTBEAT_TIMEOUT_SECONDS, is " + seconds(options_.timeout) +
                          "): the process is stopped, hung or cut off";
    HORA_LOG(error, "{}", verdict);
    silent_->declare(r, std::move(verdict));
    // Wakes every wait on this peer into the transports' "peer gone" path, which reads the verdict.
    if (sockets_[p] >= 0) ::shutdown(sockets_[p], SHUT_RDWR);
  }
}

}  // namespace hora::transport
