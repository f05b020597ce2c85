// Communicator: validates every public call, then runs the chosen algorithm (NCCL's
// validate-then-enqueue path, minus the queue: the engine adds that).
#include "hora/communicator.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/failure_report.h"
#include "collectives/flight_recorder.h"
#include "collectives/hierarchy.h"
#include "collectives/reduce.h"
#include "common/config.h"
#include "common/cpu_share.h"
#include "common/logging.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/hybrid/hybrid_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace hora {
namespace detail {

namespace {

[[noreturn]] void invalid(std::string_view op, const std::string& what) {
  throw InvalidArgumentError(std::string(op) + ": " + what);
}

void checkType(std::string_view op, DataType type) {
  const int v = static_cast<int>(type);
  if (v < 0 || v >= kNumDataTypes) invalid(op, "unknown data type " + std::to_string(v));
}

void checkOptions(std::string_view op, const AllreduceOptions& o) {
  const int v = static_cast<int>(o.op);
  if (v < 0 || v >= kNumReduceOps) invalid(op, "unknown reduce op " + std::to_string(v));
  if (!std::isfinite(o.prescale)) invalid(op, "prescale factor is not finite");
  if (!std::isfinite(o.postscale)) invalid(op, "postscale factor is not finite");
}

void checkBuffer(std::string_view op, std::string_view name, const void* p, size_t count) {
  if (p == nullptr && count > 0)
    invalid(op, std::string(name) + " buffer is null but count is " + std::to_string(count));
}

size_t checkedBytes(std::string_view op, size_t count, DataType type) {
  const size_t elem = dataTypeSize(type);
  if (count > SIZE_MAX / elem) invalid(op, "count " + std::to_string(count) + " overflows");
  return count * elem;
}

size_t checkCounts(std::string_view op, std::string_view name, std::span<const size_t> counts,
                   int size) {
  if (counts.size() != static_cast<size_t>(size))
    invalid(op, std::string(name) + " has " + std::to_string(counts.size()) +
                    " entries; expected one per rank (" + std::to_string(size) + ")");
  size_t total = 0;
  for (size_t c : counts) {
    if (total + c < total) invalid(op, std::string(name) + " overflow");
    total += c;
  }
  return total;
}

}  // namespace

// A collective made of other communicators' collectives (the hierarchical ones) reports a
// failure once, to all its ranks, at the outer level: the inner ones only pass the error up.
struct Nesting {
  static thread_local inline int depth = 0;
  Nesting() { ++depth; }
  ~Nesting() { --depth; }
};

class CommunicatorImpl {
 public:
  // labels: the number each rank has in messages, when not its rank (a split names its members
  // by their numbers in the communicator it was split from).
  CommunicatorImpl(const Identity& identity, const RendezvousOptions& rendezvous,
                   const CommunicatorOptions& options, std::vector<int> labels = {})
      : identity_(identity), options_(options), rendezvous_(rendezvous), labels_(std::move(labels)) {
    if (identity_.size == 1 && identity_.derivesTopology()) identity_.deriveTopology({identity_.hostname});
    identity_.validate();
    if (options_.chunk_bytes < 16 || options_.chunk_bytes % 16 != 0)
      throw InvalidArgumentError("chunk_bytes must be a positive multiple of 16");
    common::setLogRank(identity_.rank);
    if (identity_.size == 1) return;
    if (rendezvous.secret.empty())
      throw InvalidArgumentError("the job secret (HORA_SECRET) is empty");
    const auto deadline = common::Deadline::after(options_.timeout);
    store_ = std::make_unique<rendezvous::TcpStore>(rendezvous.address, rendezvous.port,
                                                    rendezvous.secret, deadline);
    if (!rendezvous.announce_key.empty()) store_->set(rendezvous.announce_key, identity_.hostname, deadline);
    // Hosts are told apart by hostname: every rank publishes its own; they are read when the
    // topology is derived from them or when the ranks span hosts (which peers share memory, and
    // whether the hierarchical collectives apply: every rank reads the same names, so every rank
    // decides alike).
    store_->set(rendezvous_.prefix + "host/" + std::to_string(rank()), identity_.hostname, deadline);
    if (identity_.derivesTopology()) {
      hostnames_ = readHostnames(deadline);
      identity_.deriveTopology(hostnames_);
    }
    if (identity_.local_size < identity_.size && hostnames_.empty()) hostnames_ = readHostnames(deadline);
    even_hosts_ = collectives::Hierarchy::evenHosts(hostnames_);
    placed_by_host_ = collectives::Hierarchy::placedByHost(hostnames_);
    if (identity_.local_size < identity_.size && identity_.local_size > 1 && !even_hosts_)
      HORA_LOG(info, "hierarchical collectives not possible: the hosts run different numbers of ranks");
    transport::tcp::MeshOptions mesh;
    mesh.rank = identity_.rank;
    mesh.size = identity_.size;
    mesh.secret = rendezvous.secret;
    mesh.key_prefix = rendezvous_.prefix;
    mesh.advertise_host =
        options_.iface.empty() ? store_->localHost() : common::interfaceAddress(options_.iface);
    auto peers = transport::tcp::connectMesh(mesh, *store_, deadline);
    for (int r = 0; r < size(); ++r) peers[static_cast<size_t>(r)].label = label(r);
    const bool one_host = identity_.local_size == identity_.size;
    common::CpuShare::process().noteLocalRanks(identity_.local_size);  // Note [who may spin]
    if (options_.transport == TransportChoice::kSharedMemory && !one_host) {
      throw InvalidArgumentError("HORA_TRANSPORT=shm: the " + std::to_string(identity_.size) + " ranks span " +
                                 std::to_string(identity_.cross_size) +
                                 " hosts; shared memory needs them on one (use auto or tcp)");
    }
    transport::shm::ShmOptions shm;
    shm.chunk_bytes = options_.chunk_bytes;
    shm.spin = options_.shm_spin;
    shm.key_prefix = rendezvous_.prefix;
    if (options_.transport == TransportChoice::kTcp || identity_.local_size == 1) {
      transport_ = std::make_unique<transport::tcp::TcpTransport>(identity_.rank, std::move(peers),
                                                                  options_.chunk_bytes, options_.spin);
      transport_name_ = "tcp";
    } else if (one_host) {
      std::vector<int> everyone(static_cast<size_t>(size()));
      std::iota(everyone.begin(), everyone.end(), 0);
      transport_ = std::make_unique<transport::shm::ShmTransport>(identity_.rank, std::move(peers),
                                                                  std::move(everyone), shm, *store_, deadline);
      shm_ = true;
      transport_name_ = "shared memory";
    } else {
      // Note [mixed transfer sets]: shared memory with the ranks of this host, TCP with the rest.
      std::vector<int> members;
      std::vector<transport::tcp::PeerConnection> local(peers.size());
      for (int r = 0; r < size(); ++r) {
        if (hostnames_[static_cast<size_t>(r)] != identity_.hostname) continue;
        members.push_back(r);
        local[static_cast<size_t>(r)] = std::move(peers[static_cast<size_t>(r)]);
      }
      HORA_LOG(info, "transport: shared memory with {} other rank(s) of host {}, TCP with {}", members.size() - 1,
               identity_.hostname, size() - static_cast<int>(members.size()));
      auto near = std::make_unique<transport::shm::ShmTransport>(identity_.rank, std::move(local),
                                                                 std::move(members), shm, *store_, deadline);
      auto far = std::make_unique<transport::tcp::TcpTransport>(identity_.rank, std::move(peers),
                                                                options_.chunk_bytes, options_.spin);
      // TCP's spin: the long shared-memory spin pays off against a futex wake-up, but here every
      // run also waits for the network, and a rank spinning for it takes a core from its host's
      // ranks.
      transport_ = std::make_unique<transport::hybrid::HybridTransport>(std::move(near), std::move(far),
                                                                        options_.spin);
      transport_name_ = "shared memory + tcp";
    }
  }

  const Identity& identity() const { return identity_; }
  const RendezvousOptions& rendezvous() const { return rendezvous_; }
  int size() const { return identity_.size; }
  int rank() const { return identity_.rank; }
  int label(int rank) const { return labels_.empty() ? rank : labels_[static_cast<size_t>(rank)]; }
  const CommunicatorOptions& options() const { return options_; }
  transport::Transport* transport() { return transport_.get(); }
  // "tcp", "shared memory", or "shared memory + tcp" (per pair, across hosts).
  const std::string& transportName() const { return transport_name_; }
  // Whether a collective goes through the hierarchy: ranks on several hosts with the same
  // number on each, and not turned off; the same answer on every rank.
  bool mayUseHierarchy(HierarchyChoice choice) const { return even_hosts_ && choice != HierarchyChoice::kNever; }
  // A broadcast, unless forced, only when ranks are not placed host by host: otherwise the flat
  // chain crosses each host link once too, and pipelines what the hierarchy does in two phases
  // (measured: 64 MiB across 2 x 2 hosts at 1 Gbit/s, 0.562 s flat, 0.582 s hierarchical).
  bool wantsHierarchicalBroadcast() const {
    return mayUseHierarchy(options_.hierarchical_broadcast) &&
           (options_.hierarchical_broadcast == HierarchyChoice::kAlways || !placed_by_host_);
  }
  // An allreduce also needs an element per rank and, unless forced, a large message.
  bool wantsHierarchicalAllreduce(size_t count, size_t bytes) const {
    return mayUseHierarchy(options_.hierarchical) && count >= static_cast<size_t>(size()) &&
           (options_.hierarchical == HierarchyChoice::kAlways || bytes > options_.ring_threshold_bytes);
  }
  // Messages up to this size take the latency-optimal algorithms. Over shared memory the ring's
  // extra steps cost little, so it takes over much earlier than over TCP (both measured).
  size_t ringThreshold() const { return shm_ ? options_.shm_ring_threshold_bytes : options_.ring_threshold_bytes; }

  // Runs one collective: numbers it, and turns the first failure into a broken communicator
  // whose error carries the other ranks' reports (Note [failure reports]).
  template <typename Body>
  void collective(collectives::OpKind kind, std::string_view name, size_t bytes, Body body) {
    if (broken_) rethrowAs(*broken_);
    collectives::Context ctx{*transport_, {++sequence_, static_cast<uint8_t>(kind), name},
                             common::Deadline::after(options_.timeout), scratch_};
    recorder_.start(sequence_, name, bytes);
    try {
      Nesting nest;
      body(ctx);
      recorder_.finish(sequence_);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kInternal) throw;
      if (Nesting::depth > 0) {
        broken_ = e;
        throw;
      }
      collectives::FailureReportOptions report{rank(), size(), rendezvous_.prefix, std::chrono::milliseconds(500),
                                               [this](int r) { return transport_->describePeer(r); },
                                               [this](int r) { return label(r); }};
      const std::string me = "rank " + std::to_string(label(rank()));
      const std::string message = me + ": " + e.what() + "\n    " + me + "'s last collectives: " +
                                  recorder_.describe();
      broken_.emplace(e.kind(), collectives::reportFailure(*store_, report, message, true));
      HORA_LOG(error, "{}", broken_->what());
      rethrowAs(*broken_);
    }
  }

  void checkUsable() const {
    if (broken_) rethrowAs(*broken_);
  }

  std::vector<std::byte>& prescaled() { return prescaled_; }

  // The sub-communicators of the hierarchical collectives, connected by every rank at its first
  // hierarchical collective (mayUseHierarchy says when).
  collectives::Hierarchy& hierarchy(Communicator& self) {
    if (!hierarchy_) {
      hierarchy_ = collectives::Hierarchy::build(self, hostnames_);
      HORA_LOG(info, "hierarchical collectives ready");
    }
    return *hierarchy_;
  }

 private:
  std::vector<std::string> readHostnames(const common::Deadline& deadline) {
    std::vector<std::string> hostnames(static_cast<size_t>(size()));
    for (int r = 0; r < size(); ++r) {
      try {
        hostnames[static_cast<size_t>(r)] = store_->get(rendezvous_.prefix + "host/" + std::to_string(r), deadline);
      } catch (const TimeoutError& e) {
        // Name the rank that never came, not only its key (a split set up after a link broke).
        throw TimeoutError("rank " + std::to_string(label(rank())) + ": timed out waiting for rank " +
                           std::to_string(label(r)) + " to join: " + e.what());
      }
    }
    return hostnames;
  }

  Identity identity_;
  CommunicatorOptions options_;
  RendezvousOptions rendezvous_;
  std::vector<int> labels_;
  std::unique_ptr<rendezvous::TcpStore> store_;
  std::unique_ptr<transport::Transport> transport_;
  uint32_t sequence_ = 0;
  collectives::FlightRecorder recorder_;
  std::vector<std::byte> scratch_;
  std::vector<std::byte> prescaled_;
  std::optional<Error> broken_;
  bool shm_ = false;  // the transport is shared memory
  std::string transport_name_;
  std::vector<std::string> hostnames_;  // by rank, when the ranks span hosts
  bool even_hosts_ = false;             // several hosts, the same number of ranks on each
  bool placed_by_host_ = true;          // every host's ranks numbered consecutively
  std::unique_ptr<collectives::Hierarchy> hierarchy_;
};

}  // namespace detail

using detail::checkBuffer;
using detail::checkCounts;
using detail::checkedBytes;
using detail::checkOptions;
using detail::checkType;
using collectives::OpKind;

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  const auto env = common::Env::fromProcess();
  const CommunicatorOptions options = common::communicatorOptionsFrom(env);
  common::applyLogLevel(env);
  const Identity identity = common::identityFrom(env);
  RendezvousOptions rendezvous = common::rendezvousOptionsFrom(env, identity.size);
  // Every rank creates its communicators in the same order, so numbering them per process gives
  // each its own keys in the job's store: a second communicator never reads the first's
  // addresses.
  if (rendezvous.serve_store) {
    // Rank 0 of a job without horarun serves the store for the life of the process (Note
    // [foreign launch]); it listens on the address the other ranks were told.
    static std::unique_ptr<rendezvous::TcpStoreServer> server;
    static std::mutex server_mutex;
    std::lock_guard lock(server_mutex);
    if (!server) {
      try {
        server = std::make_unique<rendezvous::TcpStoreServer>(rendezvous.address, rendezvous.port, rendezvous.secret);
      } catch (const Error& e) {
        throw InvalidArgumentError("rank 0 cannot serve the rendezvous store on " + rendezvous.address + ":" +
                                   std::to_string(rendezvous.port) + " (" + e.what() +
                                   "); rank 0 must run on that host and the port must be free: set "
                                   "HORA_RENDEZVOUS_ADDR / HORA_RENDEZVOUS_PORT");
      }
    }
  }
  static std::atomic<int> created{0};
  rendezvous.announce_key = rendezvous.prefix + "started/" + std::to_string(identity.rank);
  rendezvous.prefix += "comm" + std::to_string(created++) + "/";
  return create(identity, rendezvous, options);
}

std::unique_ptr<Communicator> Communicator::create(const Identity& identity,
                                                   const RendezvousOptions& rendezvous,
                                                   const CommunicatorOptions& options) {
  return std::unique_ptr<Communicator>(
      new Communicator(std::make_unique<detail::CommunicatorImpl>(identity, rendezvous, options)));
}

Communicator::Communicator(std::unique_ptr<detail::CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

const Identity& Communicator::identity() const { return impl_->identity(); }
const CommunicatorOptions& Communicator::options() const { return impl_->options(); }

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& members, const std::string& key) const {
  const auto bad = [&](const std::string& why) { throw InvalidArgumentError("split '" + key + "': " + why); };
  if (key.empty() || key.find('/') != std::string::npos) bad("the key must be non-empty and contain no '/'");
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size()) bad("rank " + std::to_string(members[i]) + " is out of range");
    if (i > 0 && members[i] <= members[i - 1]) bad("the members must be ascending and distinct");
  }
  const auto me = std::find(members.begin(), members.end(), rank());
  if (me == members.end()) bad("rank " + std::to_string(rank()) + " is not a member");
  Identity sub;
  sub.rank = static_cast<int>(me - members.begin());
  sub.size = static_cast<int>(members.size());
  sub.hostname = identity().hostname;
  sub.local_rank = sub.local_size = sub.cross_rank = sub.cross_size = Identity::kDerive;
  RendezvousOptions rendezvous = impl_->rendezvous();
  rendezvous.prefix += "split/" + key + "/";
  std::vector<int> labels;
  for (int m : members) labels.push_back(impl_->label(m));
  return std::unique_ptr<Communicator>(
      new Communicator(std::make_unique<detail::CommunicatorImpl>(sub, rendezvous, options(), std::move(labels))));
}

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                             const AllreduceOptions& o) {
  constexpr std::string_view op = "allreduce";
  checkType(op, type);
  checkOptions(op, o);
  checkBuffer(op, "send", send, count);
  checkBuffer(op, "recv", recv, count);
  const size_t bytes = checkedBytes(op, count, type);
  impl_->checkUsable();
  if (count == 0) return;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (o.prescale != 1.0) {
    collectives::scale(type, out, in, count, o.prescale);
    in = out;
  }
  if (size() == 1) {
    collectives::finalize(type, o.op, out, in, count, 1, o.postscale);
    return;
  }
  // Across hosts: within each host, then among the hosts (a decision every rank makes alike).
  if (impl_->wantsHierarchicalAllreduce(count, bytes)) {
    collectives::Hierarchy& h = impl_->hierarchy(*this);
    impl_->collective(OpKind::kAllreduce, op, bytes, [&](collectives::Context&) {
      h.allreduce(in, out, count, type, o, size());
    });
    return;
  }
  impl_->collective(OpKind::kAllreduce, op, bytes, [&](collectives::Context& ctx) {
    const bool small = bytes <= impl_->ringThreshold() || count < static_cast<size_t>(size());
    if (small && (o.op == ReduceOp::kMin || o.op == ReduceOp::kMax))
      collectives::disseminationAllreduce(ctx, in, out, count, type, o);
    else if (small)
      collectives::recursiveDoublingAllreduce(ctx, in, out, count, type, o);
    else
      collectives::ringAllreduce(ctx, in, out, count, type, o);
  });
}

void Communicator::allgather(const void* send, size_t send_count, void* recv,
                             std::span<const size_t> recv_counts, DataType type) {
  constexpr std::string_view op = "allgather";
  checkType(op, type);
  const size_t total = checkCounts(op, "recv_counts", recv_counts, size());
  if (send_count != recv_counts[static_cast<size_t>(rank())])
    detail::invalid(op, "send_count " + std::to_string(send_count) + " differs from recv_counts[" +
                            std::to_string(rank()) + "] = " +
                            std::to_string(recv_counts[static_cast<size_t>(rank())]));
  checkBuffer(op, "send", send, send_count);
  checkBuffer(op, "recv", recv, total);
  checkedBytes(op, total, type);
  impl_->checkUsable();
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (size() == 1) {
    if (send_count > 0 && in != out) std::memmove(out, in, send_count * dataTypeSize(type));
    return;
  }
  if (impl_->mayUseHierarchy(impl_->options().hierarchical_allgather)) {
    collectives::Hierarchy& h = impl_->hierarchy(*this);
    impl_->collective(OpKind::kAllgather, op, total * dataTypeSize(type), [&](collectives::Context&) {
      h.allgather(in, out, recv_counts, type);
    });
    return;
  }
  impl_->collective(OpKind::kAllgather, op, total * dataTypeSize(type), [&](collectives::Context& ctx) {
    collectives::ringAllgather(ctx, in, out, recv_counts, type);
  });
}

void Communicator::broadcast(void* buffer, size_t count, DataType type, int root) {
  constexpr std::string_view op = "broadcast";
  checkType(op, type);
  if (root < 0 || root >= size())
    detail::invalid(op, "root " + std::to_string(root) + " is outside [0, " + std::to_string(size()) + ")");
  checkBuffer(op, "buffer", buffer, count);
  const size_t bytes = checkedBytes(op, count, type);
  impl_->checkUsable();
  if (size() == 1 || count == 0) return;
  if (impl_->wantsHierarchicalBroadcast()) {
    collectives::Hierarchy& h = impl_->hierarchy(*this);
    impl_->collective(OpKind::kBroadcast, op, bytes, [&](collectives::Context&) {
      h.broadcast(buffer, count, type, root);
    });
    return;
  }
  impl_->collective(OpKind::kBroadcast, op, bytes, [&](collectives::Context& ctx) {
    collectives::broadcast(ctx, static_cast<std::byte*>(buffer), bytes, root, impl_->ringThreshold());
  });
}

void Communicator::reducescatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                 DataType type, const AllreduceOptions& o) {
  constexpr std::string_view op = "reducescatter";
  checkType(op, type);
  checkOptions(op, o);
  const size_t total = checkCounts(op, "recv_counts", recv_counts, size());
  checkBuffer(op, "send", send, total);
  checkBuffer(op, "recv", recv, recv_counts[static_cast<size_t>(rank())]);
  const size_t bytes = checkedBytes(op, total, type);
  impl_->checkUsable();
  if (total == 0) return;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (o.prescale != 1.0) {
    auto& copy = impl_->prescaled();
    copy.resize(bytes);
    collectives::scale(type, copy.data(), in, total, o.prescale);
    in = copy.data();
  }
  if (size() == 1) {
    collectives::finalize(type, o.op, out, in, total, 1, o.postscale);
    return;
  }
  impl_->collective(OpKind::kReducescatter, op, bytes, [&](collectives::Context& ctx) {
    collectives::ringReduceScatter(ctx, in, out, recv_counts, type, o);
  });
}

void Communicator::alltoall(const void* send, std::span<const size_t> send_counts, void* recv,
                            std::span<const size_t> recv_counts, DataType type) {
  constexpr std::string_view op = "alltoall";
  checkType(op, type);
  const size_t send_total = checkCounts(op, "send_counts", send_counts, size());
  const size_t recv_total = checkCounts(op, "recv_counts", recv_counts, size());
  checkBuffer(op, "send", send, send_total);
  checkBuffer(op, "recv", recv, recv_total);
  checkedBytes(op, std::max(send_total, recv_total), type);
  const auto me = static_cast<size_t>(rank());
  if (send_counts[me] != recv_counts[me])
    detail::invalid(op, "send_counts[" + std::to_string(me) + "] = " + std::to_string(send_counts[me]) +
                            " differs from recv_counts[" + std::to_string(me) + "] = " +
                            std::to_string(recv_counts[me]) + " (this rank's block to itself)");
  impl_->checkUsable();
  if (size() == 1) {
    if (send_total > 0 && send != recv) std::memmove(recv, send, send_total * dataTypeSize(type));
    return;
  }
  impl_->collective(OpKind::kAlltoall, op, send_total * dataTypeSize(type), [&](collectives::Context& ctx) {
    collectives::pairwiseAlltoall(ctx, static_cast<const std::byte*>(send), send_counts,
                                  static_cast<std::byte*>(recv), recv_counts, type);
  });
}

std::vector<size_t> Communicator::exchangeCounts(std::span<const size_t> counts) {
  checkCounts("exchangeCounts", "counts", counts, size());
  std::vector<size_t> received(counts.size());
  const std::vector<size_t> ones(counts.size(), 1);
  static_assert(sizeof(size_t) == sizeof(int64_t));
  alltoall(counts.data(), ones, received.data(), ones, DataType::kInt64);
  return received;
}

std::string Communicator::algorithmFor(std::string_view collective, size_t bytes, ReduceOp op) const {
  if (size() == 1) return "local";
  // (The element count is not known here; only tensors with fewer elements than ranks differ.)
  if (collective == "allreduce" && impl_->wantsHierarchicalAllreduce(SIZE_MAX, bytes))
    return "hierarchical (reduce-scatter, allreduce across hosts, allgather)";
  if (collective == "allgather" && impl_->mayUseHierarchy(impl_->options().hierarchical_allgather))
    return "hierarchical (allgather across hosts, then inside each)";
  if (collective == "broadcast" && impl_->wantsHierarchicalBroadcast())
    return "hierarchical (broadcast across hosts, then inside each)";
  const bool small = bytes <= impl_->ringThreshold();
  std::string algorithm = "ring";
  if (collective == "allreduce" && small)
    algorithm = op == ReduceOp::kMin || op == ReduceOp::kMax ? "dissemination" : "recursive doubling";
  else if (collective == "broadcast")
    algorithm = small ? "binomial tree" : "chain";
  else if (collective == "alltoall")
    algorithm = "pairwise";
  return algorithm + " over " + impl_->transportName();
}

void Communicator::barrier() {
  impl_->checkUsable();
  if (size() == 1) return;
  impl_->collective(OpKind::kBarrier, "barrier", 0,
                    [&](collectives::Context& ctx) { collectives::disseminationBarrier(ctx); });
}

bool Communicator::waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) {
  impl_->checkUsable();
  if (size() == 1) {
    if (wake_fd < 0) {
      std::this_thread::sleep_for(timeout);
      return false;
    }
    pollfd fd{wake_fd, POLLIN, 0};
    return ::poll(&fd, 1, static_cast<int>(timeout.count())) > 0;
  }
  return impl_->transport()->waitForIncoming(timeout, wake_fd);
}

}  // namespace hora
