#include "transport/tcp/tcp_connect.h"

#include <cstring>

#include "common/crypto.h"
#include "common/logging.h"
#include "hora/errors.h"

namespace hora::transport::tcp {
namespace {

constexpr uint32_t kHandshakeMagic = 0x31485248;  // "HRH1"
// A silent connection may hold up the acceptor at most this long before it is dropped.
constexpr auto kHandshakeLimit = std::chrono::seconds(5);

// The MAC covers the communicator's key prefix too, so that only ranks of the same communicator
// (and, in an elastic job, of the same generation: Note [generations] in
// src/bootstrap/elastic_join.cc) can complete a handshake.
common::Mac pairMac(const MeshOptions& o, std::string_view label, const common::Nonce& challenge, uint32_t from,
                    uint32_t to) {
  auto bytes = [](const void* p, size_t n) {
    return std::span<const uint8_t>(static_cast<const uint8_t*>(p), n);
  };
  const uint32_t prefix_length = static_cast<uint32_t>(o.key_prefix.size());
  return common::hmacSha256(o.secret, {bytes(label.data(), label.size()), bytes(&prefix_length, 4),
                                       bytes(o.key_prefix.data(), o.key_prefix.size()), challenge, bytes(&from, 4),
                                       bytes(&to, 4)});
}

// Longest key prefix a peer may announce; a longer one is garbage, not a communicator.
constexpr uint32_t kMaxPrefixBytes = 4096;

// "'gen3/' (elastic generation 3)": how the handshake names a communicator in messages.
std::string describeCommunicator(const std::string& prefix) {
  std::string text = "'" + prefix + "'";
  size_t digits = 3;
  while (digits < prefix.size() && prefix[digits] >= '0' && prefix[digits] <= '9') ++digits;
  if (prefix.rfind("gen", 0) == 0 && digits > 3 && digits < prefix.size() && prefix[digits] == '/')
    text += " (elastic generation " + prefix.substr(3, digits - 3) + ")";
  return text;
}

// The sender's key prefix, length first: it travels in the clear (it is no secret) so that a peer
// of another communicator or generation is refused with both named; the MACs still bind it.
void writePrefix(int fd, const std::string& prefix, const common::Deadline& deadline, const std::string& what) {
  const uint32_t length = static_cast<uint32_t>(prefix.size());
  common::writeFull(fd, &length, 4, deadline, what);
  common::writeFull(fd, prefix.data(), prefix.size(), deadline, what);
}

std::string readPrefix(int fd, const common::Deadline& deadline, const std::string& what) {
  uint32_t length = 0;
  common::readFull(fd, &length, 4, deadline, what);
  if (length > kMaxPrefixBytes) throw PeerError(what + " announced a key prefix of " + std::to_string(length) + " bytes");
  std::string prefix(length, '\0');
  common::readFull(fd, prefix.data(), length, deadline, what);
  return prefix;
}

std::string addressKey(const MeshOptions& o, int rank) {
  return o.key_prefix + "tcp/" + std::to_string(rank);
}

PeerConnection connectTo(const MeshOptions& o, int peer, rendezvous::Store& store,
                         const common::Deadline& deadline) {
  const std::string where = store.get(addressKey(o, peer), deadline);
  const auto colon = where.rfind(':');
  const std::string host = where.substr(0, colon);
  const int port = std::stoi(where.substr(colon + 1));
  const std::string what = "rank " + std::to_string(peer) + " (" + where + ")";
  common::Fd fd = common::connectTcp(host, port, deadline, what);
  uint8_t hello[4 + common::kNonceBytes];
  common::readFull(fd.get(), hello, sizeof(hello), deadline, what);
  uint32_t magic;
  std::memcpy(&magic, hello, 4);
  if (magic != kHandshakeMagic) throw PeerError(what + " did not greet as a hora rank");
  common::Nonce challenge;
  std::memcpy(challenge.data(), hello + 4, challenge.size());
  const std::string peer_prefix = readPrefix(fd.get(), deadline, what);
  const uint32_t from = static_cast<uint32_t>(o.rank), to = static_cast<uint32_t>(peer);
  common::writeFull(fd.get(), &from, 4, deadline, what);
  writePrefix(fd.get(), o.key_prefix, deadline, what);
  const auto mac = pairMac(o, "pair", challenge, from, to);
  common::writeFull(fd.get(), mac.data(), mac.size(), deadline, what);
  // The acceptor refuses too (and logs both); saying it here names both to the stale rank itself.
  if (peer_prefix != o.key_prefix)
    throw AuthenticationError(what + " belongs to communicator " + describeCommunicator(peer_prefix) +
                              ", not to this rank's " + describeCommunicator(o.key_prefix) +
                              ": a rank of another generation cannot join this ring");
  uint8_t ok[common::kMacBytes];
  try {
    common::readFull(fd.get(), ok, sizeof(ok), deadline, what);
  } catch (const PeerError&) {
    throw AuthenticationError(what + " refused this rank's handshake; do both have the same "
                              "HORA_SECRET, and are both of this communicator (elastic: this generation)?");
  }
  if (!common::macEqual(pairMac(o, "pair-ok", challenge, from, to), ok))
    throw AuthenticationError(what + " could not prove the job secret (HORA_SECRET differs, or the peer "
                              "belongs to another communicator or elastic generation than " + o.key_prefix + ")");
  return {std::move(fd), where};
}

// Runs the acceptor's side of one handshake; returns the peer's rank, or -1 after logging why
// the connection was dropped.
int acceptOne(const MeshOptions& o, common::Fd& fd, const common::Deadline& deadline) {
  const std::string from_addr = common::peerAddress(fd.get()).str();
  const auto limit = common::Deadline::after(
      std::min(deadline.remaining(), std::chrono::milliseconds(kHandshakeLimit)));
  try {
    const common::Nonce challenge = common::randomNonce();
    uint8_t hello[4 + common::kNonceBytes];
    std::memcpy(hello, &kHandshakeMagic, 4);
    std::memcpy(hello + 4, challenge.data(), challenge.size());
    common::writeFull(fd.get(), hello, sizeof(hello), limit, from_addr);
    writePrefix(fd.get(), o.key_prefix, limit, from_addr);
    uint32_t from;
    common::readFull(fd.get(), &from, 4, limit, from_addr);
    const std::string peer_prefix = readPrefix(fd.get(), limit, from_addr);
    uint8_t mac[common::kMacBytes];
    common::readFull(fd.get(), mac, sizeof(mac), limit, from_addr);
    if (peer_prefix != o.key_prefix) {
      HORA_LOG(warn, "refused a connection from {} claiming rank {} of communicator {}: this ring is {}",
               from_addr, from, describeCommunicator(peer_prefix), describeCommunicator(o.key_prefix));
      return -1;
    }
    const uint32_t to = static_cast<uint32_t>(o.rank);
    if (from >= static_cast<uint32_t>(o.size) || from <= to) {
      HORA_LOG(warn, "dropped a connection from {}: it claims rank {}, not a higher rank of this "
               "job of size {}", from_addr, from, o.size);
      return -1;
    }
    if (!common::macEqual(pairMac(o, "pair", challenge, from, to), mac)) {
      HORA_LOG(warn, "dropped a connection from {} claiming rank {}: it cannot prove the job "
               "secret for {} (another secret, communicator or elastic generation)", from_addr, from, o.key_prefix);
      return -1;
    }
    const auto ok = pairMac(o, "pair-ok", challenge, from, to);
    common::writeFull(fd.get(), ok.data(), ok.size(), limit, from_addr);
    return static_cast<int>(from);
  } catch (const Error& e) {
    HORA_LOG(warn, "dropped a connection from {} during the handshake: {}", from_addr, e.what());
    return -1;
  }
}

}  // namespace

std::vector<PeerConnection> connectMesh(const MeshOptions& o, rendezvous::Store& store,
                                        const common::Deadline& deadline) {
  std::vector<PeerConnection> peers(static_cast<size_t>(o.size));
  common::Fd listener = common::listenTcp(o.advertise_host, 0);
  const int port = common::localAddress(listener.get()).port;
  store.set(addressKey(o, o.rank), o.advertise_host + ":" + std::to_string(port), deadline);

  for (int peer = 0; peer < o.rank; ++peer)
    peers[static_cast<size_t>(peer)] = connectTo(o, peer, store, deadline);

  int missing = o.size - o.rank - 1;
  while (missing > 0) {
    std::string waiting = "ranks";
    for (int r = o.rank + 1; r < o.size; ++r)
      if (!peers[static_cast<size_t>(r)].fd.valid()) waiting.append(" ").append(std::to_string(r));
    common::Fd fd = common::acceptTcp(listener.get(), deadline, waiting.append(" to connect"));
    const int from = acceptOne(o, fd, deadline);
    if (from < 0) continue;
    auto& slot = peers[static_cast<size_t>(from)];
    if (slot.fd.valid()) {
      HORA_LOG(warn, "dropped a second connection claiming rank {}", from);
      continue;
    }
    slot.address = store.get(addressKey(o, from), deadline);
    slot.fd = std::move(fd);
    --missing;
  }
  // The listener closes here: later connection attempts are refused by the kernel.
  return peers;
}

}  // namespace hora::transport::tcp
