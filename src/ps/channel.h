// Channel: one worker <-> parameter server pair, and the messages (messages.h) on it.
//
// The pair is a bootstrap Connection of two ranks (server = rank 0, worker = rank 1) under the
// store prefix "ps/s<server>/w<worker>/" of the job's store, so it is authenticated with the job
// secret and uses shared memory on one host and TCP across hosts, like any hora connection.
// A message is its header and its payload as two transfers of one Transport::run; every message
// of a direction carries the next sequence number of that direction in the transport's frames,
// so a lost or repeated message is a MismatchError rather than misread bytes.
//
// Errors: the transport's (PeerError when the other side died, TimeoutError at the deadline),
// rethrown with `who` (e.g. "parameter server 1 (host a, pid 42)") in front.
// Thread safety: one thread at a time (a server's session thread, or the client's thread for that
// server's exchange).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "bootstrap/connect.h"
#include "common/deadline.h"
#include "hora/errors.h"
#include "ps/messages.h"

namespace hora::ps {

class Channel {
 public:
  enum class Side { kServer, kWorker };

  // Blocks until the other side has connected too, or options.timeout passes.
  Channel(Side side, int server, int worker, const std::string& hostname, const RendezvousOptions& job,
          const CommunicatorOptions& options, std::string who);

  void send(const MessageHeader& header, const void* payload, const common::Deadline& deadline);
  MessageHeader receiveHeader(const common::Deadline& deadline);
  // The payload the last header announced (header.bytes of it).
  void receivePayload(void* data, size_t bytes, const common::Deadline& deadline);
  // Until the other side sent something (or left), `wake_fd` is readable, or `timeout`.
  bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd);
  // The other side closed its connection cleanly (a transport goodbye), which waitForIncoming
  // does not wake for: after a timeout, whether it did.
  bool peerDeparted() const;

  const std::string& who() const { return who_; }
  // A send or receive failed: the transport is broken and the channel can carry nothing more.
  bool broken() const { return broken_; }
  // The same error with who() in front.
  [[noreturn]] void fail(const Error& e) const;

 private:
  transport::OpTag tag(uint32_t sequence) const;

  bootstrap::Connection connection_;
  std::string who_;
  int peer_ = 0;
  uint32_t sent_ = 0;
  uint32_t received_ = 0;
  bool broken_ = false;
};

}  // namespace hora::ps
