#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "transport/tcp/frame.h"

namespace hora::transport::tcp {

// Note [peer liveness]: a rank learns that a peer is gone from its socket: read() returning 0,
// or, for a peer the current transfer set does not involve, POLLRDHUP. A peer that shut down
// cleanly sent a kGoodbye frame first, so a close with nothing buffered before it means the
// peer died. A peer that is ahead of us may have buffered frames of a later collective before
// its close; we cannot look past those without consuming them, so such a peer is judged when
// this rank reads from it.

TcpTransport::TcpTransport(int rank, std::vector<PeerConnection> peers, size_t chunk_bytes,
                           std::chrono::microseconds spin, std::shared_ptr<const SilentPeers> silent)
    : rank_(rank), peers_(std::move(peers)), departed_(peers_.size(), false),
      chunk_bytes_(chunk_bytes), spin_(spin), scratch_(peers_.size()), lanes_(peers_.size()),
      unwatched_(peers_.size(), false), silent_(std::move(silent)) {
  for (auto& p : peers_)
    if (p.fd.valid()) common::setNonBlocking(p.fd.get());
}

TcpTransport::~TcpTransport() {
  if (broken_) return;  // a broken stream may hold half a frame; just close
  FrameHeader bye;
  bye.kind = FrameKind::kGoodbye;
  for (auto& p : peers_) {
    if (!p.fd.valid()) continue;
    [[maybe_unused]] auto n = ::send(p.fd.get(), &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(p.fd.get(), SHUT_WR);
  }
}

std::string TcpTransport::describePeer(int rank) const {
  return describePeerConnection(peers_, rank);
}

void TcpTransport::fail(Error error) {
  // The heartbeat shut a silent peer's socket itself: its verdict is the cause, not a close.
  if (silent_ && error.kind() == ErrorKind::kPeer)
    if (auto verdict = silent_->anyVerdict()) error = PeerError(*verdict + "\n    (here: " + error.what() + ")");
  broken_ = error;
  rethrowAs(error);
}

void TcpTransport::failConnection(const OpTag& tag, std::string what_the_socket_says) {
  // The heartbeat's shutdown() is what the socket reports; "closed the connection" would be wrong.
  if (silent_ && silent_->any())
    fail(PeerError("this rank was in " + std::string(tag.name) + " #" + std::to_string(tag.sequence) + owed()));
  fail(PeerError(std::move(what_the_socket_says)));
}

void TcpTransport::validateHeader(int peer, const FrameHeader& h, const Transfer& t,
                                  const OpTag& tag) {
  // Composed only on failure (see ShmTransport::progressRecv).
  const auto who = [&] { return describePeer(peer); };
  const auto here = [&] { return std::string(tag.name) + " #" + std::to_string(tag.sequence); };
  if (h.magic != kFrameMagic)
    fail(PeerError(who() + " sent bytes that are not a hora frame during " + here() +
                   " (garbage on the data connection)"));
  if (h.kind == FrameKind::kGoodbye)
    fail(PeerError(who() + " has shut down its communicator while this rank still expects " +
                   std::to_string(t.bytes) + " bytes from it in " + here()));
  if (h.sequence != tag.sequence || h.op != tag.op)
    fail(MismatchError(who() + " is in " + collectiveNamed(h.op) + " #" + std::to_string(h.sequence) +
                       " while this rank is in " + here() +
                       ": ranks called collectives in different orders or counts"));
  if (h.bytes != t.bytes)
    fail(MismatchError(who() + " sends " + std::to_string(h.bytes) + " bytes where this rank expects " +
                       std::to_string(t.bytes) + " in " + here() +
                       ": counts or data types differ between ranks"));
}

bool TcpTransport::progressSend(int peer, Lane& lane, const OpTag& tag) {
  bool progressed = false;
  lane.want_io = false;
  const int fd = peers_[static_cast<size_t>(peer)].fd.get();
  while (!lane.idle()) {
    Transfer& t = *lane.queue[lane.head];
    if (lane.header_done == 0) lane.header = {kFrameMagic, tag.op, FrameKind::kData, tag.sequence, t.bytes};
    const size_t avail = t.ready ? std::min(*t.ready, t.bytes) : t.bytes;
    iovec iov[2];
    int n = 0;
    if (lane.header_done < sizeof(FrameHeader))
      iov[n++] = {reinterpret_cast<char*>(&lane.header) + lane.header_done,
                  sizeof(FrameHeader) - lane.header_done};
    if (t.done < avail) iov[n++] = {t.data + t.done, avail - t.done};
    if (n == 0) {
      if (t.done < t.bytes) return progressed;  // waiting for `ready`, not for the socket
      ++lane.head;
      lane.header_done = 0;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        lane.want_io = true;
        return progressed;
      }
      failConnection(tag, "sending to " + describePeer(peer) + " failed in " + std::string(tag.name) + ": " +
                              std::strerror(errno) + " (the peer died or closed its connection)");
    }
    progressed = true;
    size_t k = static_cast<size_t>(w);
    const size_t h = std::min(k, sizeof(FrameHeader) - lane.header_done);
    lane.header_done += h;
    t.done += k - h;
  }
  return progressed;
}

std::span<std::byte> TcpTransport::receiveSpace(int peer, const Lane& lane, const Transfer& t) {
  if (t.data != nullptr) return {t.data + t.done, t.bytes - t.done};
  if (t.bytes == 0) return {};
  auto& scratch = scratch_[static_cast<size_t>(peer)];
  if (scratch.empty()) scratch.resize(chunk_bytes_);
  const size_t chunk = std::min(chunk_bytes_, t.bytes - t.done);
  return {scratch.data() + lane.scratch_fill, chunk - lane.scratch_fill};
}

void TcpTransport::deliver(int peer, Lane& lane, Transfer& t, size_t bytes) {
  if (t.data != nullptr) {
    t.done += bytes;
    return;
  }
  lane.scratch_fill += bytes;
  const size_t chunk = std::min(chunk_bytes_, t.bytes - t.done);
  if (lane.scratch_fill == chunk) {
    t.on_chunk(t.done, scratch_[static_cast<size_t>(peer)].data(), chunk);
    t.done += chunk;
    lane.scratch_fill = 0;
  }
}

ssize_t TcpTransport::receive(int peer, msghdr& msg, const Transfer& t, const OpTag& tag) {
  while (true) {
    const ssize_t r = ::recvmsg(peers_[static_cast<size_t>(peer)].fd.get(), &msg, 0);
    if (r > 0) return r;
    if (r == 0) {
      failConnection(tag, describePeer(peer) + " closed the connection while this rank expects " +
                              std::to_string(t.bytes - t.done) + " more bytes from it in " + std::string(tag.name) +
                              " #" + std::to_string(tag.sequence) + " (the process died or was killed)");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    failConnection(tag, "receiving from " + describePeer(peer) + " failed in " + std::string(tag.name) + ": " +
                            std::strerror(errno) + " (the peer died or reset its connection)");
  }
}

bool TcpTransport::progressRecv(int peer, Lane& lane, const OpTag& tag) {
  bool progressed = false;
  lane.want_io = false;
  while (!lane.idle()) {
    Transfer& t = *lane.queue[lane.head];
    const bool header_complete = lane.header_done == sizeof(FrameHeader);
    if (header_complete && t.done == t.bytes) {
      ++lane.head;
      lane.header_done = 0;
      continue;
    }
    iovec iov[2];
    int n = 0;
    if (!header_complete)
      iov[n++] = {reinterpret_cast<char*>(&lane.header) + lane.header_done, sizeof(FrameHeader) - lane.header_done};
    // Until the header is validated, read no further than this frame's payload.
    const std::span<std::byte> space = receiveSpace(peer, lane, t);
    if (!space.empty()) iov[n++] = {space.data(), space.size()};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    size_t k = static_cast<size_t>(receive(peer, msg, t, tag));
    if (k == 0) {
      lane.want_io = true;
      return progressed;
    }
    progressed = true;
    if (!header_complete) {
      const size_t h = std::min(k, sizeof(FrameHeader) - lane.header_done);
      lane.header_done += h;
      k -= h;
      if (lane.header_done == sizeof(FrameHeader)) validateHeader(peer, lane.header, t, tag);
    }
    if (k > 0) deliver(peer, lane, t, k);
  }
  return progressed;
}

void TcpTransport::checkIdlePeer(int peer, const OpTag& tag) {
  FrameHeader h;
  const ssize_t r = ::recv(peers_[static_cast<size_t>(peer)].fd.get(), &h, sizeof(h),
                           MSG_PEEK | MSG_DONTWAIT);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    failConnection(tag, describePeer(peer) + " closed its connection without shutting down "
                        "(the process died or was killed)");
  if (r == static_cast<ssize_t>(sizeof(h)) && h.magic == kFrameMagic &&
      h.kind == FrameKind::kGoodbye)
    departed_[static_cast<size_t>(peer)] = true;
  // Otherwise it holds data of a later collective: judged when read (Note [peer liveness]).
  unwatched_[static_cast<size_t>(peer)] = true;
}

bool TcpTransport::serves(int peer) const {
  return peer >= 0 && peer < size() && peers_[static_cast<size_t>(peer)].fd.valid();
}

void TcpTransport::begin(std::span<Transfer> transfers) {
  if (broken_) rethrowAs(*broken_);
  lanes_.assign(transfers, [this](int peer) { return serves(peer); });
  std::fill(unwatched_.begin(), unwatched_.end(), false);
}

bool TcpTransport::advance(const OpTag& tag) {
  return lanes_.advance([&](int p, auto& pair) {
    const bool sent = progressSend(p, pair.send, tag);
    return progressRecv(p, pair.recv, tag) || sent;
  });
}

bool TcpTransport::pending() const { return lanes_.pending(); }

bool TcpTransport::prepareWait(std::vector<pollfd>& fds) {
  polled_.clear();
  for (int p = 0; p < size(); ++p) {
    if (!serves(p)) continue;
    const auto& r = lanes_[p];
    short events = 0;
    if (r.send.want_io) events |= POLLOUT;
    if (!r.recv.idle()) events |= POLLIN;
    if (r.idle() && !unwatched_[static_cast<size_t>(p)] && !departed_[static_cast<size_t>(p)]) events |= POLLRDHUP;
    if (events == 0) continue;
    fds.push_back({peers_[static_cast<size_t>(p)].fd.get(), events, 0});
    polled_.push_back(p);
  }
  return true;
}

void TcpTransport::finishWait(std::span<const pollfd> fds, const OpTag& tag) {
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0 && lanes_[polled_[i]].idle()) checkIdlePeer(polled_[i], tag);
  }
}

std::string TcpTransport::owed() const {
  std::string owed;
  for (int p : lanes_.active()) {
    const auto& recv = lanes_[p].recv;
    if (!recv.idle()) {
      const Transfer& t = *recv.queue[recv.head];
      owed += "; receiving from " + describePeer(p) + ": " + std::to_string(t.done) + " of " +
              std::to_string(t.bytes) + " bytes arrived";
    }
    const auto& send = lanes_[p].send;
    if (!send.idle() && send.want_io) {
      const Transfer& t = *send.queue[send.head];
      owed += "; sending to " + describePeer(p) + ": " + std::to_string(t.done) + " of " +
              std::to_string(t.bytes) + " bytes accepted (the peer is not reading)";
    }
  }
  return owed;
}

bool TcpTransport::prepareIdle(std::vector<pollfd>& fds) {
  polled_.clear();
  for (int p = 0; p < size(); ++p) {
    if (!serves(p) || departed_[static_cast<size_t>(p)]) continue;
    fds.push_back({peers_[static_cast<size_t>(p)].fd.get(), static_cast<short>(POLLIN | POLLRDHUP), 0});
    polled_.push_back(p);
  }
  return true;
}

bool TcpTransport::finishIdle(std::span<const pollfd> fds) {
  bool woken = false;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    // A goodbye is no collective: that peer is done, keep waiting for the others.
    FrameHeader h;
    const ssize_t r = ::recv(fds[i].fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(sizeof(h)) && h.magic == kFrameMagic && h.kind == FrameKind::kGoodbye) {
      departed_[static_cast<size_t>(polled_[i])] = true;
      continue;
    }
    woken = true;  // data, or a closed connection that the next collective will name
  }
  return woken;
}

bool TcpTransport::waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) {
  PeerGroup* self = this;
  return waitIdle({&self, 1}, timeout, wake_fd);
}

void TcpTransport::run(std::span<Transfer> transfers, const OpTag& tag,
                       const common::Deadline& deadline) {
  for (const Transfer& t : transfers) {
    if (!serves(t.peer)) throw InternalError("transfer to invalid peer " + std::to_string(t.peer));
  }
  Spinner spinner(0, spin_, spin_history_, spin_off_until_);
  PeerGroup* self = this;
  try {
    runGroups({&self, 1}, transfers, tag, deadline, spinner);
  } catch (const TimeoutError& e) {
    breakWith(e);
    throw;
  }
}

}  // namespace hora::transport::tcp
