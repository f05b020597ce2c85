#include "transport/shm/shm_transport.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "transport/shm/inbox.h"
#include "common/shared_segment.h"

namespace hora::transport::shm {

// Note [shm rings]: the channel from rank s to rank r lives in r's inbox: a ring (Note [ring
// depth]) and two positions on their own cache lines, `written` (advanced by s) and `consumed`
// (advanced by r), both counting bytes since the start and never wrapping. The ring carries a
// stream of messages, each a 16-byte header (magic, collective sequence and op, length) and the
// payload padded to 16 bytes, so every position a reader can see is 16-aligned and a header never
// straddles the end of the ring. The writer copies data in and then publishes `written`
// (seq_cst, which orders it before the look at `sleeping` below); the reader reads in place and
// then publishes `consumed` the same way. Each side only ever writes its own position: no locks.
//
// Sleeping: a rank with nothing to do sets `sleeping` in its inbox header, reads the futex word
// `doorbell`, checks once more that no ring has moved, and waits on the futex. Whoever moves a
// ring the sleeper waits on (new data for it, or room freed in a ring it writes) bumps the
// doorbell and wakes it when `sleeping` is set. Publishing a position and reading `sleeping`, and
// setting `sleeping` and checking the rings, are sequentially consistent pairs, so one of the two
// sides always sees the other (no lost wake-up). A rank that also waits for TCP peers sleeps in
// poll() instead (Note [mixed transfer sets]): `sleeping` then says kInPoll, and the first peer
// to move a ring takes the flag and sends one kWake byte on its socket, which that poll() watches.
//
// Note [ring depth]: a ring holds its share of HORA_SHM_INBOX_BYTES (the inbox split evenly among
// the peers), and at least kMinRingChunks chunks. Its depth is how far a sender may run ahead of
// its receiver. While training threads hold every core, a rank's engine that waits sleeps at
// once (Note [who may spin]), and each sleep costs a wake-up and a wait for a core, often longer
// than the copy it waited for. With rings of 4 chunks (1 MiB), the engine of a 2-rank WRN-16-10 job
// (65 MiB of gradients a step) ran 114-164 times a step on a loaded machine; with 8 MiB rings
// 73-106 times; its CPU did not fall (an 8 MiB ring leaves the cache; docs/benchmarks/wrn.md). Larger rings cost shared memory:
// local ranks x HORA_SHM_INBOX_BYTES for the host.
//
// Note [shm liveness]: shared memory cannot tell that a peer died, but the TCP mesh that set the
// job up can: its sockets stay open, carrying only two kinds of byte, kWake (wake an idle
// engine, see waitForIncoming) and kGoodbye (sent by a rank shutting down cleanly). A socket that
// closes without a goodbye belongs to a dead peer. A rank blocked in run() wakes every
// kLivenessCheck to look at the sockets of the peers it waits for.

namespace {

constexpr size_t kMinRingChunks = 4;  // Note [ring depth]
constexpr char kWake = 'W';
constexpr char kGoodbye = 'G';
constexpr auto kLivenessCheck = std::chrono::milliseconds(20);
constexpr int kBusyPolls = 2000;  // about 2-10 us of polling before the first yield
constexpr uint32_t kOnFutex = 1;   // Inbox::Header::sleeping
constexpr uint32_t kInPoll = 2;

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

// Each of the n - 1 peers' rings gets an even share of the inbox (Note [ring depth]).
size_t ringBytes(const ShmOptions& options, int members) {
  const size_t peers = static_cast<size_t>(std::max(members - 1, 1));
  const size_t share = (options.inbox_bytes / peers) & ~size_t{15};
  return std::max({share, roundUp16(options.chunk_bytes * kMinRingChunks), size_t{4096}});
}

ShmTransport::ShmTransport(int rank, std::vector<tcp::PeerConnection> peers, std::vector<int> members,
                           const ShmOptions& options, rendezvous::Store& store, const common::Deadline& deadline,
                           std::shared_ptr<const SilentPeers> silent)
    : rank_(rank), options_(options), peers_(std::move(peers)), members_(std::move(members)),
      slot_(peers_.size(), -1), inboxes_(peers_.size(), nullptr), written_(peers_.size(), 0),
      consumed_(peers_.size(), 0), departed_(peers_.size(), false), closed_(peers_.size(), false),
      lanes_(peers_.size()), silent_(std::move(silent)) {
  const int n = static_cast<int>(members_.size());
  for (int i = 0; i < n; ++i) slot_[static_cast<size_t>(members_[static_cast<size_t>(i)])] = i;
  const size_t ring_bytes = ringBytes(options_, n);
  const size_t bytes = Inbox::bytesFor(n, ring_bytes);
  auto [name, mine] = common::createSegment(bytes);
  try {
    auto* inbox = new (mine) Inbox{};
    inbox->header.magic = kInboxMagic;
    inbox->header.size = static_cast<uint32_t>(n);
    inbox->header.ring_bytes = ring_bytes;
    for (int i = 0; i < n; ++i) new (&inbox->channel(i)) Channel{};
    inboxes_[static_cast<size_t>(rank_)] = inbox;
    const std::string prefix = options_.key_prefix + "shm/";
    store.set(prefix + std::to_string(rank_), name, deadline);
    for (int p : members_) {
      if (p == rank_) continue;
      const std::string peer_name = store.get(prefix + std::to_string(p), deadline);
      auto* peer = static_cast<Inbox*>(common::mapSegment(peer_name, bytes, p));
      inboxes_[static_cast<size_t>(p)] = peer;
      if (peer->header.magic != kInboxMagic || peer->header.size != static_cast<uint32_t>(n) ||
          peer->header.ring_bytes != ring_bytes) {
        throw MismatchError("rank " + std::to_string(p) + "'s shared-memory segment has another layout " +
                            "(HORA_CHUNK_BYTES or HORA_SHM_INBOX_BYTES differs between ranks?)");
      }
    }
    // Every member has mapped everything: the names can go, so nothing outlives the job.
    store.set(prefix + "mapped/" + std::to_string(rank_), "1", deadline);
    for (int p : members_) {
      if (p != rank_) store.get(prefix + "mapped/" + std::to_string(p), deadline);
    }
    ::shm_unlink(name.c_str());
  } catch (...) {
    ::shm_unlink(name.c_str());
    for (Inbox* inbox : inboxes_) {
      if (inbox) ::munmap(inbox, bytes);
    }
    throw;
  }
  for (auto& p : peers_) {
    if (p.fd.valid()) common::setNonBlocking(p.fd.get());
  }
}

ShmTransport::~ShmTransport() {
  for (size_t p = 0; p < peers_.size(); ++p) {
    if (!peers_[p].fd.valid()) continue;
    if (!broken_) {
      [[maybe_unused]] auto n = ::send(peers_[p].fd.get(), &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::shutdown(peers_[p].fd.get(), SHUT_WR);
  }
  const size_t bytes = Inbox::bytesFor(static_cast<int>(members_.size()),
                                       inboxes_[static_cast<size_t>(rank_)]->header.ring_bytes);
  for (Inbox* inbox : inboxes_) {
    if (inbox) ::munmap(inbox, bytes);
  }
}

std::string ShmTransport::describePeer(int rank) const {
  return tcp::describePeerConnection(peers_, rank, "shared memory; ");
}

void ShmTransport::fail(Error error) {
  // The heartbeat shut a silent peer's socket itself: its verdict is the cause, not a close.
  if (silent_ && error.kind() == ErrorKind::kPeer)
    if (auto verdict = silent_->anyVerdict()) error = PeerError(*verdict + "\n    (here: " + error.what() + ")");
  broken_ = error;
  rethrowAs(error);
}

Channel& ShmTransport::outgoing(int peer) const {
  return inboxes_[static_cast<size_t>(peer)]->channel(slot_[static_cast<size_t>(rank_)]);
}
Channel& ShmTransport::incoming(int peer) const {
  return inboxes_[static_cast<size_t>(rank_)]->channel(slot_[static_cast<size_t>(peer)]);
}

bool ShmTransport::serves(int peer) const {
  return peer >= 0 && peer < size() && peer != rank_ && slot_[static_cast<size_t>(peer)] >= 0;
}

void ShmTransport::ring(int peer, bool wake_idle) {
  auto& h = inboxes_[static_cast<size_t>(peer)]->header;
  const int fd = peers_[static_cast<size_t>(peer)].fd.get();
  const uint32_t sleeping = h.sleeping.load(std::memory_order_seq_cst);
  if (sleeping == kOnFutex) {
    h.doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex(&h.doorbell, FUTEX_WAKE, 1, nullptr);
  } else if (sleeping == kInPoll) {
    uint32_t expected = kInPoll;  // one byte per sleep, however many rings move
    if (h.sleeping.compare_exchange_strong(expected, 0))
      [[maybe_unused]] auto n = ::send(fd, &kWake, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (wake_idle && h.idle.load(std::memory_order_seq_cst) != 0 && h.idle.exchange(0) != 0) {
    [[maybe_unused]] auto n = ::send(fd, &kWake, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

bool ShmTransport::progressSend(int peer, Lane& lane, const OpTag& tag) {
  bool progressed = false;
  Channel& ch = outgoing(peer);
  const size_t capacity = inboxes_[static_cast<size_t>(peer)]->header.ring_bytes;
  std::byte* ring_data = inboxes_[static_cast<size_t>(peer)]->ringOf(slot_[static_cast<size_t>(rank_)]);
  uint64_t& w = written_[static_cast<size_t>(peer)];
  while (!lane.idle()) {
    Transfer& t = *lane.queue[lane.head];
    size_t room = capacity - static_cast<size_t>(w - ch.consumed.load(std::memory_order_acquire));
    if (!lane.header_done) {
      if (room < kHeaderBytes) break;
      const MessageHeader h{kMessageMagic, tag.sequence, tag.op, static_cast<uint32_t>(t.bytes)};
      std::memcpy(ring_data + w % capacity, &h, sizeof(h));
      w += kHeaderBytes;
      room -= kHeaderBytes;
      lane.header_done = true;
      progressed = true;
    }
    const size_t ready = t.ready ? std::min(*t.ready, t.bytes) : t.bytes;
    size_t n = std::min({ready - t.done, room, capacity - w % capacity, options_.chunk_bytes});
    const bool last = t.done + n == t.bytes;
    if (!last) n &= ~size_t{15};  // positions stay 16-aligned until the message's end
    if (n > 0 || last) {
      if (n > 0) std::memcpy(ring_data + w % capacity, t.data + t.done, n);
      t.done += n;
      w += last ? roundUp16(n) : n;
      progressed = true;
    }
    if (progressed) {
      ch.written.store(w, std::memory_order_seq_cst);  // publish, then look (Note [shm rings])
      ring(peer, true);
    }
    if (!last) break;  // waiting for room or for `ready`
    ++lane.head;
    lane.header_done = false;
  }
  return progressed;
}

bool ShmTransport::progressRecv(int peer, Lane& lane, const OpTag& tag) {
  bool progressed = false;
  Channel& ch = incoming(peer);
  Inbox& inbox = *inboxes_[static_cast<size_t>(rank_)];
  const size_t capacity = inbox.header.ring_bytes;
  const std::byte* ring_data = inbox.ringOf(slot_[static_cast<size_t>(peer)]);
  uint64_t& r = consumed_[static_cast<size_t>(peer)];
  while (!lane.idle()) {
    Transfer& t = *lane.queue[lane.head];
    size_t avail = static_cast<size_t>(ch.written.load(std::memory_order_acquire) - r);
    if (!lane.header_done) {
      if (avail < kHeaderBytes) break;
      MessageHeader h;
      std::memcpy(&h, ring_data + r % capacity, sizeof(h));
      // The messages are composed only on failure: building them for every header cost a
      // tenth of a small allreduce's time.
      const auto who = [&] { return describePeer(peer); };
      const auto here = [&] { return std::string(tag.name) + " #" + std::to_string(tag.sequence); };
      if (h.magic != kMessageMagic) fail(PeerError(who() + " wrote a corrupt message header during " + here()));
      if (h.sequence != tag.sequence || h.op != tag.op) {
        fail(MismatchError(who() + " is in " + collectiveNamed(h.op) + " #" +
                           std::to_string(h.sequence) + " while this rank is in " + here() +
                           ": ranks called collectives in different orders or counts"));
      }
      if (h.bytes_low != static_cast<uint32_t>(t.bytes)) {
        fail(MismatchError(who() + " sends " + std::to_string(h.bytes_low) + " bytes where this rank expects " +
                           std::to_string(t.bytes) + " in " + here() + ": counts or data types differ between ranks"));
      }
      r += kHeaderBytes;
      avail -= kHeaderBytes;
      lane.header_done = true;
      progressed = true;
    }
    const size_t n = std::min({t.bytes - t.done, avail, capacity - r % capacity, options_.chunk_bytes});
    const bool last = t.done + n == t.bytes;
    if (n > 0) {
      const std::byte* chunk = ring_data + r % capacity;
      if (t.data) {
        std::memcpy(t.data + t.done, chunk, n);
      } else {
        t.on_chunk(t.done, chunk, n);  // reads the peer's data in place
      }
      t.done += n;
      progressed = true;
    }
    if (progressed) {
      r += last ? roundUp16(n) : n;
      ch.consumed.store(r, std::memory_order_seq_cst);
      ring(peer, false);
    }
    if (!last) break;
    ++lane.head;
    lane.header_done = false;
  }
  return progressed;
}

// True when some lane could move now: data waiting for a receive, room for a send whose data is
// ready.
bool ShmTransport::canProgress() const {
  for (int p : lanes_.active()) {
    const auto& run = lanes_[p];
    if (!run.recv.idle() &&
        incoming(p).written.load(std::memory_order_seq_cst) != consumed_[static_cast<size_t>(p)]) {
      return true;
    }
    if (!run.send.idle()) {
      const Transfer& t = *run.send.queue[run.send.head];
      const size_t capacity = inboxes_[static_cast<size_t>(p)]->header.ring_bytes;
      const size_t used = static_cast<size_t>(written_[static_cast<size_t>(p)] -
                                              outgoing(p).consumed.load(std::memory_order_seq_cst));
      const size_t ready = t.ready ? std::min(*t.ready, t.bytes) : t.bytes;
      if (used + kHeaderBytes <= capacity && (ready > t.done || !run.send.header_done || t.bytes == 0)) return true;
    }
  }
  return false;
}

void ShmTransport::sleepOnDoorbell(const common::Deadline& deadline) {
  auto& h = inboxes_[static_cast<size_t>(rank_)]->header;
  h.sleeping.store(kOnFutex, std::memory_order_seq_cst);  // announce, then look (Note [shm rings])
  const uint32_t bell = h.doorbell.load(std::memory_order_seq_cst);
  if (!canProgress()) {
    const auto slice = std::min<std::chrono::milliseconds>(
        kLivenessCheck, std::max(deadline.remaining(), std::chrono::milliseconds(1)));
    timespec ts{0, static_cast<long>(std::chrono::nanoseconds(slice).count())};
    futex(&h.doorbell, FUTEX_WAIT, bell, &ts);
  }
  h.sleeping.store(0, std::memory_order_relaxed);
}

bool ShmTransport::drainSocket(int peer) {
  const size_t p = static_cast<size_t>(peer);
  if (closed_[p]) return false;
  char buffer[64];
  while (true) {
    const ssize_t r = ::recv(peers_[p].fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (r > 0) {
      if (std::find(buffer, buffer + r, kGoodbye) != buffer + r) departed_[p] = true;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    closed_[p] = true;  // EOF or a reset
    return false;
  }
}

// A peer this rank waits for whose socket closed is gone; what it wrote
// before is still in the ring, so it is only an error once nothing more can move (Note [shm liveness]).
void ShmTransport::checkPeers(const OpTag& tag) {
  // A peer declared dead dooms this run even when this rank waits for someone else: the ones it
  // waits for wait, directly or not, for the dead one (Note [heartbeat]).
  if (silent_ && silent_->any())
    fail(PeerError("this rank was in " + std::string(tag.name) + " #" + std::to_string(tag.sequence) + owed()));
  std::vector<pollfd> fds;
  std::vector<int> waited_for;  // peers with transfers left; a peer that is done may leave
  for (int p : lanes_.active()) {
    const auto& run = lanes_[p];
    if (run.idle()) continue;
    fds.push_back({peers_[static_cast<size_t>(p)].fd.get(), POLLIN | POLLRDHUP, 0});
    waited_for.push_back(p);
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    const int p = waited_for[i];
    if (fds[i].revents == 0 || drainSocket(p)) continue;
    if (canProgress()) return;  // finish reading what it left first
    const auto& run = lanes_[p];
    const std::string here = std::string(tag.name) + " #" + std::to_string(tag.sequence);
    const std::string owed = !run.recv.idle() ? "expects " + std::to_string(run.recv.queue[run.recv.head]->bytes) +
                                                    " bytes from it"
                                              : "is sending to it";
    if (departed_[static_cast<size_t>(p)]) {
      fail(PeerError(describePeer(p) + " has shut down its communicator while this rank still " + owed + " in " + here));
    }
    fail(PeerError(describePeer(p) + " closed its connection (the process died?) while this rank " + owed + " in " +
                   here));
  }
}

void ShmTransport::begin(std::span<Transfer> transfers) {
  if (broken_) rethrowAs(*broken_);
  for (const Transfer& t : transfers) {
    if (serves(t.peer) && t.bytes > UINT32_MAX) throw InternalError("a shared-memory message is limited to 4 GiB");
  }
  lanes_.assign(transfers, [this](int peer) { return serves(peer); });
}

bool ShmTransport::advance(const OpTag& tag) {
  return lanes_.advance([&](int p, auto& pair) {
    const bool sent = progressSend(p, pair.send, tag);
    return progressRecv(p, pair.recv, tag) || sent;
  });
}

bool ShmTransport::pending() const { return lanes_.pending(); }

// Sleeping in a poll() shared with TCP peers: every member's socket is watched, since the one
// peer that takes the kInPoll flag may be one this set does not involve (Note [shm rings]).
bool ShmTransport::prepareWait(std::vector<pollfd>& fds) {
  auto& h = inboxes_[static_cast<size_t>(rank_)]->header;
  h.sleeping.store(kInPoll, std::memory_order_seq_cst);  // announce, then look
  polled_.clear();
  // A closed peer's socket stays readable (EOF), so it is watched only while this rank waits for
  // it: then the poll returns at once and checkPeers names it. Left out, a peer found closed
  // while this rank was idle would never wake this wait, which would last until the timeout.
  std::vector<bool> waited_for(closed_.size(), false);
  for (int p : lanes_.active()) waited_for[static_cast<size_t>(p)] = !lanes_[p].idle();
  for (int p : members_) {
    if (p == rank_ || (closed_[static_cast<size_t>(p)] && !waited_for[static_cast<size_t>(p)])) continue;
    fds.push_back({peers_[static_cast<size_t>(p)].fd.get(), static_cast<short>(POLLIN | POLLRDHUP), 0});
    polled_.push_back(p);
  }
  return !canProgress();
}

void ShmTransport::finishWait(std::span<const pollfd> fds, const OpTag& tag) {
  inboxes_[static_cast<size_t>(rank_)]->header.sleeping.store(0, std::memory_order_seq_cst);
  bool any = false;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    any = true;
    drainSocket(polled_[i]);
  }
  if (any) checkPeers(tag);
}

std::string ShmTransport::owed() const {
  std::string owed;
  for (int p : lanes_.active()) {
    const auto& r = lanes_[p];
    if (!r.recv.idle()) {
      const Transfer& t = *r.recv.queue[r.recv.head];
      owed += "; receiving from " + describePeer(p) + ": " + std::to_string(t.done) + " of " +
              std::to_string(t.bytes) + " bytes arrived";
    }
    if (!r.send.idle()) {
      const Transfer& t = *r.send.queue[r.send.head];
      owed += "; sending to " + describePeer(p) + ": " + std::to_string(t.done) + " of " +
              std::to_string(t.bytes) + " bytes written";
    }
  }
  return owed;
}

void ShmTransport::run(std::span<Transfer> transfers, const OpTag& tag, const common::Deadline& deadline) {
  for (const Transfer& t : transfers) {
    if (!serves(t.peer)) throw InternalError("transfer to invalid peer " + std::to_string(t.peer));
  }
  begin(transfers);
  // Note [shm waiting]: a peer's answer to a small message comes within a microsecond or two
  // when it has a core of its own, so first poll the rings without any system call; then retry
  // for HORA_SHM_SPIN_MICROSECONDS yielding the CPU; then sleep on the futex. Whether it may
  // poll or yield at all is the host's and the last waits' call (Note [spin, then block]).
  Spinner spinner(kBusyPolls, options_.spin, spin_history_, spin_off_until_);
  using Clock = common::Deadline::Clock;
  Clock::time_point next_check{};  // set on the first wait: most small runs never wait
  while (true) {
    const bool progressed = advance(tag);
    if (progressed) spinner.progressed();
    if (!pending()) return;
    if (progressed) continue;
    if (spinner.again()) continue;
    const auto now = Clock::now();
    if (next_check == Clock::time_point{}) next_check = now + kLivenessCheck;
    if (now >= next_check) {
      checkPeers(tag);
      next_check = now + kLivenessCheck;
    }
    if (deadline.expired()) {
      fail(TimeoutError("timed out after " + std::to_string(deadline.timeout().count()) + " ms in " +
                        std::string(tag.name) + " #" + std::to_string(tag.sequence) + owed()));
    }
    sleepOnDoorbell(deadline);
  }
}

bool ShmTransport::prepareIdle(std::vector<pollfd>& fds) {
  auto& h = inboxes_[static_cast<size_t>(rank_)]->header;
  h.idle.store(1, std::memory_order_seq_cst);
  polled_.clear();
  for (int p : members_) {
    if (p != rank_ && incoming(p).written.load(std::memory_order_seq_cst) != consumed_[static_cast<size_t>(p)])
      return false;
  }
  for (int p : members_) {
    if (p == rank_ || closed_[static_cast<size_t>(p)]) continue;
    fds.push_back({peers_[static_cast<size_t>(p)].fd.get(), static_cast<short>(POLLIN | POLLRDHUP), 0});
    polled_.push_back(p);
  }
  return true;
}

// Wake-up bytes only end the poll(): the next prepareIdle() looks at the rings, so a stale byte
// (one sent to a poll() in run() that had already ended) wakes nobody.
bool ShmTransport::finishIdle(std::span<const pollfd> fds) {
  inboxes_[static_cast<size_t>(rank_)]->header.idle.store(0);
  bool lost = false;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const size_t p = static_cast<size_t>(polled_[i]);
    // A goodbye is no collective: that peer is done. A close without one is a lost peer,
    // which the next collective names.
    if (!drainSocket(polled_[i]) && !departed_[p]) lost = true;
  }
  return lost;
}

bool ShmTransport::waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) {
  PeerGroup* self = this;
  return waitIdle({&self, 1}, timeout, wake_fd);
}

}  // namespace hora::transport::shm
