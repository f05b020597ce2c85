#include "bootstrap/connect.h"

#include <algorithm>
#include <numeric>

#include "bootstrap/knob_agreement.h"
#include "common/cpu_share.h"
#include "common/logging.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "transport/hybrid/hybrid_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace hora::bootstrap {

namespace {

// Every rank's hostname, by rank.
std::vector<std::string> readHostnames(const Connection& c, const common::Deadline& deadline) {
  std::vector<std::string> hostnames(static_cast<size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r) {
    try {
      hostnames[static_cast<size_t>(r)] = c.store->get(c.rendezvous.prefix + "host/" + std::to_string(r), deadline);
    } catch (const TimeoutError& e) {
      // Name the rank that never came, not only its key (a split set up after a link broke).
      throw TimeoutError("rank " + std::to_string(c.label(c.rank())) + ": timed out waiting for rank " +
                         std::to_string(c.label(r)) + " to join: " + e.what());
    }
  }
  return hostnames;
}

// Hosts are told apart by hostname: every rank publishes its own; they are read when the
// topology is derived from them or when the ranks span hosts.
void learnTopology(Connection& c, const common::Deadline& deadline) {
  c.store->set(c.rendezvous.prefix + "host/" + std::to_string(c.rank()), c.identity.hostname, deadline);
  if (c.identity.derivesTopology()) {
    c.topology.hostnames = readHostnames(c, deadline);
    c.identity.deriveTopology(c.topology.hostnames);
  }
  if (c.identity.local_size < c.size() && c.topology.hostnames.empty())
    c.topology.hostnames = readHostnames(c, deadline);
  if (c.identity.local_size < c.size() && c.identity.local_size > 1 && !c.topology.evenHosts())
    HORA_LOG(info, "hierarchical collectives not possible: the hosts run different numbers of ranks");
}

std::vector<transport::tcp::PeerConnection> connectTcpMesh(const Connection& c, const std::string& advertise_host,
                                                           const common::Deadline& deadline) {
  transport::tcp::MeshOptions mesh;
  mesh.rank = c.rank();
  mesh.size = c.size();
  mesh.secret = c.rendezvous.secret;
  mesh.key_prefix = c.rendezvous.prefix;
  mesh.advertise_host = advertise_host;
  auto peers = transport::tcp::connectMesh(mesh, *c.store, deadline);
  for (int r = 0; r < c.size(); ++r) peers[static_cast<size_t>(r)].label = c.label(r);
  return peers;
}

// Shared memory with the ranks of this host, TCP with the rest (Note [mixed transfer sets]).
std::unique_ptr<transport::Transport> hybridTransport(Connection& c, std::vector<transport::tcp::PeerConnection> peers,
                                                      const CommunicatorOptions& options,
                                                      const transport::shm::ShmOptions& shm,
                                                      const common::Deadline& deadline) {
  std::vector<int> members;
  std::vector<transport::tcp::PeerConnection> local(peers.size());
  for (int r = 0; r < c.size(); ++r) {
    if (c.topology.hostnames[static_cast<size_t>(r)] != c.identity.hostname) continue;
    members.push_back(r);
    local[static_cast<size_t>(r)] = std::move(peers[static_cast<size_t>(r)]);
  }
  HORA_LOG(info, "transport: shared memory with {} other rank(s) of host {}, TCP with {}", members.size() - 1,
           c.identity.hostname, c.size() - static_cast<int>(members.size()));
  auto near = std::make_unique<transport::shm::ShmTransport>(c.rank(), std::move(local), std::move(members), shm,
                                                             *c.store, deadline, c.silent);
  auto far = std::make_unique<transport::tcp::TcpTransport>(c.rank(), std::move(peers), options.chunk_bytes,
                                                            options.spin, c.silent);
  // TCP's spin: the long shared-memory spin pays off against a futex wake-up, but here every run
  // also waits for the network, and a rank spinning for it takes a core from its host's ranks.
  c.transport_name = "shared memory + tcp";
  return std::make_unique<transport::hybrid::HybridTransport>(std::move(near), std::move(far), options.spin);
}

// HORA_TRANSPORT and the topology decide: TCP, shared memory, or both (per pair).
void chooseTransport(Connection& c, std::vector<transport::tcp::PeerConnection> peers,
                     const CommunicatorOptions& options, const common::Deadline& deadline) {
  const bool one_host = c.identity.local_size == c.size();
  if (options.transport == TransportChoice::kSharedMemory && !one_host) {
    throw InvalidArgumentError("HORA_TRANSPORT=shm: the " + std::to_string(c.size()) + " ranks span " +
                               std::to_string(c.identity.cross_size) +
                               " hosts; shared memory needs them on one (use auto or tcp)");
  }
  transport::shm::ShmOptions shm;
  shm.chunk_bytes = options.chunk_bytes;
  shm.inbox_bytes = options.shm_inbox_bytes;
  shm.spin = options.shm_spin;
  shm.key_prefix = c.rendezvous.prefix;
  if (options.transport == TransportChoice::kTcp || c.identity.local_size == 1) {
    c.transport = std::make_unique<transport::tcp::TcpTransport>(c.rank(), std::move(peers), options.chunk_bytes,
                                                                 options.spin, c.silent);
    c.transport_name = "tcp";
  } else if (one_host) {
    std::vector<int> everyone(static_cast<size_t>(c.size()));
    std::iota(everyone.begin(), everyone.end(), 0);
    c.transport = std::make_unique<transport::shm::ShmTransport>(c.rank(), std::move(peers), std::move(everyone),
                                                                 shm, *c.store, deadline, c.silent);
    c.shared_memory = true;
    c.transport_name = "shared memory";
  } else {
    c.transport = hybridTransport(c, std::move(peers), options, shm, deadline);
  }
}

// The heartbeat (Note [heartbeat]) is made while the mesh's sockets are still at hand, and
// started once the transport owns them.
void prepareHeartbeat(Connection& c, const std::vector<transport::tcp::PeerConnection>& peers,
                      const CommunicatorOptions& options, const std::string& advertise_host,
                      const common::Deadline& deadline) {
  if (options.heartbeat_timeout.count() <= 0) return;
  transport::HeartbeatOptions o;
  o.rank = c.rank();
  o.size = c.size();
  o.secret = c.rendezvous.secret;
  o.key_prefix = c.rendezvous.prefix;
  o.advertise_host = advertise_host;
  o.timeout = options.heartbeat_timeout;
  std::vector<int> sockets;
  std::vector<std::string> names;
  for (int r = 0; r < c.size(); ++r) {
    sockets.push_back(peers[static_cast<size_t>(r)].fd.get());
    names.push_back(r == c.rank() ? "" : transport::tcp::describePeerConnection(peers, r));
  }
  c.silent = std::make_shared<transport::SilentPeers>(c.size());
  c.heartbeat = std::make_unique<transport::Heartbeat>(o, std::move(sockets), std::move(names), c.silent, *c.store,
                                                       deadline);
}

}  // namespace

Connection connect(const Identity& identity, const RendezvousOptions& rendezvous, const CommunicatorOptions& options,
                   std::vector<int> labels, const std::string* job_knobs) {
  Connection c;
  c.identity = identity;
  c.rendezvous = rendezvous;
  c.labels = std::move(labels);
  if (c.size() == 1 && c.identity.derivesTopology()) c.identity.deriveTopology({c.identity.hostname});
  c.identity.validate();
  if (c.labels.empty()) common::setLogRank(c.rank());  // a subset's members keep the job's number
  if (options.chunk_bytes < 16 || options.chunk_bytes % 16 != 0)
    throw InvalidArgumentError("chunk_bytes must be a positive multiple of 16");
  if (c.size() == 1) return c;
  if (rendezvous.secret.empty()) throw InvalidArgumentError("the job secret (HORA_SECRET) is empty");
  const auto deadline = common::Deadline::after(options.timeout);
  auto store = std::make_unique<rendezvous::TcpStore>(rendezvous.address, rendezvous.port, rendezvous.secret, deadline);
  const rendezvous::TcpStore& tcp_store = *store;
  c.store = std::move(store);
  if (!rendezvous.announce_key.empty()) c.store->set(rendezvous.announce_key, c.identity.hostname, deadline);
  if (job_knobs) {
    // Before anything the knobs decide (the transport, the hierarchy): Note [knob agreement].
    agreeOnKnobs(*c.store, c.rendezvous.prefix, c.rank(), c.size(), *job_knobs, [&c](int r) { return c.label(r); },
                 deadline);
  }
  learnTopology(c, deadline);
  const std::string advertise_host = options.iface.empty() ? tcp_store.localHost() : common::interfaceAddress(options.iface);
  auto peers = connectTcpMesh(c, advertise_host, deadline);
  common::CpuShare::process().noteLocalRanks(c.identity.local_size);  // Note [who may spin]
  prepareHeartbeat(c, peers, options, advertise_host, deadline);
  chooseTransport(c, std::move(peers), options, deadline);
  if (c.heartbeat) c.heartbeat->start();
  return c;
}

Connection connectSubset(const Connection& parent, const std::vector<int>& members, const std::string& key,
                         const CommunicatorOptions& options) {
  const auto me = std::find(members.begin(), members.end(), parent.rank());
  Identity sub;
  sub.rank = static_cast<int>(me - members.begin());
  sub.size = static_cast<int>(members.size());
  sub.hostname = parent.identity.hostname;
  sub.local_rank = sub.local_size = sub.cross_rank = sub.cross_size = Identity::kDerive;
  RendezvousOptions rendezvous = parent.rendezvous;
  rendezvous.prefix += "split/" + key + "/";
  rendezvous.announce_key.clear();
  std::vector<int> labels;
  for (int m : members) labels.push_back(parent.label(m));
  return connect(sub, rendezvous, options, std::move(labels));
}

}  // namespace hora::bootstrap
