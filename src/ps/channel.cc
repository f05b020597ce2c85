#include "ps/channel.h"

#include <vector>

#include "hora/errors.h"

namespace hora::ps {

namespace {

// The byte every frame of a channel carries as its "collective": outside CollectiveKind, so that
// a channel's frame is never taken for a collective's.
constexpr uint8_t kChannelOp = 0xF0;

Identity pairIdentity(Channel::Side side, const std::string& hostname) {
  Identity id;
  id.rank = side == Channel::Side::kServer ? 0 : 1;
  id.size = 2;
  id.hostname = hostname;
  // Derived from the two hostnames: shared memory when they match (bootstrap::connect).
  id.local_rank = id.local_size = id.cross_rank = id.cross_size = Identity::kDerive;
  return id;
}

}  // namespace

Channel::Channel(Side side, int server, int worker, const std::string& hostname, const RendezvousOptions& job,
                 const CommunicatorOptions& options, std::string who)
    : who_(std::move(who)), peer_(side == Side::kServer ? 1 : 0) {
  RendezvousOptions pair = job;
  pair.prefix += "ps/s" + std::to_string(server) + "/w" + std::to_string(worker) + "/";
  pair.announce_key.clear();
  pair.serve_store = false;
  try {
    // Labels keep the worker's log prefix (a Connection without labels renames the process's
    // log rank) and number the two sides as messages know them.
    connection_ = bootstrap::connect(pairIdentity(side, hostname), pair, options, {server, worker});
  } catch (const Error& e) {
    fail(e);
  }
}

transport::OpTag Channel::tag(uint32_t sequence) const { return {sequence, kChannelOp, "parameter server message"}; }

void Channel::fail(const Error& e) const {
  rethrowAs(Error(e.kind(), who_ + ": " + e.what()));
}

void Channel::send(const MessageHeader& header, const void* payload, const common::Deadline& deadline) {
  std::vector<transport::Transfer> transfers = {transport::Transfer::send(peer_, &header, sizeof(header))};
  if (header.bytes > 0) transfers.push_back(transport::Transfer::send(peer_, payload, header.bytes));
  try {
    connection_.transport->run(transfers, tag(sent_), deadline);
  } catch (const Error& e) {
    broken_ = true;
    fail(e);
  }
  ++sent_;
}

MessageHeader Channel::receiveHeader(const common::Deadline& deadline) {
  MessageHeader header;
  std::vector<transport::Transfer> transfers = {transport::Transfer::recv(peer_, &header, sizeof(header))};
  try {
    connection_.transport->run(transfers, tag(received_), deadline);
  } catch (const Error& e) {
    broken_ = true;
    fail(e);
  }
  if (header.magic != kMessageMagic) fail(PeerError("sent a message that is not a parameter server message"));
  if (header.bytes == 0) ++received_;
  return header;
}

void Channel::receivePayload(void* data, size_t bytes, const common::Deadline& deadline) {
  if (bytes == 0) return;
  std::vector<transport::Transfer> transfers = {transport::Transfer::recv(peer_, data, bytes)};
  try {
    connection_.transport->run(transfers, tag(received_), deadline);
  } catch (const Error& e) {
    broken_ = true;
    fail(e);
  }
  ++received_;
}

bool Channel::waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) {
  return connection_.transport->waitForIncoming(timeout, wake_fd);
}

bool Channel::peerDeparted() const { return connection_.transport->departed(peer_); }

}  // namespace hora::ps
