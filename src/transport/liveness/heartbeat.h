// Heartbeat: tells a frozen peer from a slow one, for one connection (Note [heartbeat]).
//
// Note [heartbeat]: a SIGSTOPped rank, or one whose host hangs, keeps its sockets open and its
// kernel keeps acknowledging TCP, so no read ever fails: without more, the others wait for the
// collective timeout (HORA_TIMEOUT_SECONDS, 30 s). So every process runs a thread per connection
// that sends each peer a small datagram every `timeout / 6` and watches the peers' datagrams. A
// peer silent for `timeout` (HORA_HEARTBEAT_TIMEOUT_SECONDS) is declared dead: its verdict goes
// to SilentPeers and its TCP socket is shut down on this side, which wakes whatever waits on that
// peer (a run() in poll(), the shared-memory liveness check, an idle engine) into the existing
// "peer gone" path; the transport then names the verdict.
//   - Why its own thread: the engine thread can be inside a long reduction and the frontend can
//     compute for minutes between collectives; only a thread that does nothing else keeps beating
//     as long as the process runs at all, and a stopped process is exactly one where it cannot.
//   - Why UDP beside the mesh, not bytes on the mesh's sockets: a TCP socket carries frames that
//     the engine thread writes in pieces, so another thread could not slip a beat in between; and
//     a frozen peer's full receive buffer would block or drop a TCP beat anyway. A datagram needs
//     no lock against the data plane and is simply lost when the peer does not read.
//   - Each datagram carries its sender, a sequence number and an HMAC over both and the
//     connection's key prefix with the job secret: nothing outside the job (or an older elastic
//     generation) can keep a dead peer alive, and a replayed beat is ignored.
//   - Before judging, the thread reads every datagram already queued, so a thread that was
//     itself starved of the CPU does not take its own lateness for the peers' silence.
//   - A peer that shuts down cleanly sends a goodbye datagram and is never judged after it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/socket.h"
#include "rendezvous/store.h"
#include "transport/liveness/silent_peers.h"

namespace hora::transport {

struct HeartbeatOptions {
  int rank = 0;
  int size = 1;
  std::string secret;
  std::string key_prefix;      // the connection's part of the store, also authenticated
  std::string advertise_host;  // the address the socket binds and peers send to
  std::chrono::milliseconds timeout{3000};  // silence after which a peer is declared dead
};

class Heartbeat {
 public:
  // Binds the socket, publishes its address under "<prefix>heartbeat/<rank>" and reads every
  // peer's. `sockets`: by rank, the descriptor of the mesh connection to shut down when that peer
  // is declared dead (-1 for this rank); they must stay open until this object is destroyed.
  // `names`: by rank, "rank 3 (10.0.0.2:4000)" for verdicts.
  Heartbeat(const HeartbeatOptions& options, std::vector<int> sockets, std::vector<std::string> names,
            std::shared_ptr<SilentPeers> silent, rendezvous::Store& store, const common::Deadline& deadline);
  // Says goodbye to every peer, then stops and joins the thread.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Starts beating and judging; the silence of each peer is counted from here.
  void start();

 private:
  enum class Kind : uint32_t { kBeat = 1, kGoodbye = 2 };
  void loop();
  void sendAll(Kind kind);
  void readQueued(common::Deadline::Clock::time_point now);
  void judge(common::Deadline::Clock::time_point now);

  const HeartbeatOptions options_;
  const std::chrono::milliseconds period_;
  std::vector<int> sockets_;
  std::vector<std::string> names_;
  std::shared_ptr<SilentPeers> silent_;
  common::Fd udp_;
  common::Fd stop_;  // eventfd: readable once the destructor runs
  std::vector<sockaddr_in> addresses_;  // by rank
  std::vector<common::Deadline::Clock::time_point> last_heard_;
  std::vector<uint64_t> last_sequence_;
  std::vector<bool> gone_;  // said goodbye, or declared dead
  std::vector<std::chrono::milliseconds> worst_gap_;  // for the log at the end
  uint64_t sequence_ = 0;
  std::thread thread_;
};

}  // namespace hora::transport
