// Bootstrap: turns "I am rank r of n, the store is there" into a connected group of ranks.
//
// The control plane (the rendezvous store) is set up here and kept apart from the data plane
// (the transport), as NCCL's bootstrap is: every rank publishes its hostname, reads the others'
// (the Topology), connects the TCP mesh through the store and chooses the transport (Note [mixed
// transfer sets]). The collectives above see only the abstract Store and Transport this returns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap/topology.h"
#include "hora/identity.h"
#include "hora/options.h"
#include "rendezvous/store.h"
#include "transport/liveness/heartbeat.h"
#include "transport/liveness/silent_peers.h"
#include "transport/transport.h"

namespace hora::bootstrap {

// A connected group of ranks: what a communicator (or one level of its hierarchy) runs on.
struct Connection {
  Identity identity;              // with the local and cross fields derived when asked for
  RendezvousOptions rendezvous;   // its prefix is this group's part of the store
  std::vector<int> labels;        // by rank: its number in messages, when not its rank
  Topology topology;              // hostnames, when derived or when the ranks span hosts
  std::unique_ptr<rendezvous::Store> store;         // null for a group of one
  std::shared_ptr<transport::SilentPeers> silent;   // the heartbeat's verdicts; read by the transport
  std::unique_ptr<transport::Transport> transport;  // null for a group of one
  // Declared after the transport, so it stops before the transport closes the sockets it shuts
  // down; null for a group of one or with HORA_HEARTBEAT_TIMEOUT_SECONDS=0.
  std::unique_ptr<transport::Heartbeat> heartbeat;
  std::string transport_name;     // "tcp", "shared memory", or "shared memory + tcp"
  bool shared_memory = false;     // every peer is reached through shared memory

  int rank() const { return identity.rank; }
  int size() const { return identity.size; }
  // The number rank r has in messages (a split's member keeps its number in the job).
  int label(int r) const { return labels.empty() ? r : labels[static_cast<size_t>(r)]; }
};

// Connects to every rank of the group. Blocks until all have connected or options.timeout
// passes (TimeoutError naming the rank that never came). With `job_knobs` (jobKnobs() of the
// environment the options came from), the ranks first check that they agree on them
// (knob_agreement.h): InvalidArgumentError on every rank when they do not.
Connection connect(const Identity& identity, const RendezvousOptions& rendezvous, const CommunicatorOptions& options,
                   std::vector<int> labels = {}, const std::string* job_knobs = nullptr);

// The members (ascending ranks of `parent`, this rank among them) as a group of their own,
// under `key` in the parent's part of the store; every member calls it alike.
Connection connectSubset(const Connection& parent, const std::vector<int>& members, const std::string& key,
                         const CommunicatorOptions& options);

}  // namespace hora::bootstrap
