// Establishes the TCP mesh of a communicator: one authenticated connection per pair of ranks.
//
// Note [pair handshake]: every rank listens on an ephemeral port and publishes "host:port" in the
// store under "<prefix>tcp/<rank>". Rank i connects to every rank j < i and accepts from every
// rank j > i (no cycle, so no deadlock). On accept, the acceptor sends "HRH1" + a random
// challenge + its key prefix; the connector answers with its rank, its key prefix and
// HMAC(secret, "pair" | prefix | challenge | from | to); the acceptor answers with
// HMAC(secret, "pair-ok" | prefix | challenge | from | to), so both sides prove the job secret
// without sending it. The prefixes travel in the clear so that a rank of another communicator
// (an elastic job's older generation: "gen<g>/") is refused with both named, on both sides. A connection that fails the handshake (garbage, a wrong
// secret, a rank outside the job, silence for 5 s) is logged and dropped, and
// the acceptor keeps waiting for the real peer until the deadline.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/socket.h"
#include "rendezvous/store.h"

namespace hora::transport::tcp {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::string secret;
  std::string advertise_host;  // the address peers connect to (also bound)
  std::string key_prefix;
};

struct PeerConnection {
  common::Fd fd;
  std::string address;  // host:port of the peer's end, for messages
  int label = -1;       // the peer's number in messages when it is not its rank (a split's member
                        // keeps its number in the job)
};

// "rank 3 (<detail>10.0.0.2:4000)": how transports name the peer `rank` in messages.
inline std::string describePeerConnection(const std::vector<PeerConnection>& peers, int rank, const char* detail = "") {
  const PeerConnection& p = peers[static_cast<size_t>(rank)];
  return "rank " + std::to_string(p.label >= 0 ? p.label : rank) + " (" + detail + p.address + ")";
}

// Returns `size` entries; entry `rank` is empty.
std::vector<PeerConnection> connectMesh(const MeshOptions& options, rendezvous::Store& store,
                                        const common::Deadline& deadline);

}  // namespace hora::transport::tcp
