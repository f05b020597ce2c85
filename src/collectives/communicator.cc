// Communicator: validates every public call, plans it (plan.h), then runs the planned algorithm
// on its world Group or through its Hierarchy (NCCL's validate-then-enqueue path, minus the
// queue: the engine adds that). Connecting is the bootstrap's (bootstrap/connect.h).
#include "hora/communicator.h"

#include <poll.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "bootstrap/connect.h"
#include "bootstrap/job/elastic_join.h"
#include "bootstrap/job/job.h"
#include "collectives/adasum.h"
#include "collectives/algorithms.h"
#include "collectives/failure_report.h"
#include "collectives/flight_recorder.h"
#include "collectives/group.h"
#include "collectives/hierarchy.h"
#include "collectives/plan.h"
#include "collectives/reduce.h"
#include "common/config.h"
#include "common/logging.h"
#include "hora/errors.h"

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

class CommunicatorImpl {
 public:
  CommunicatorImpl(bootstrap::Connection connection, const CommunicatorOptions& options)
      : options_(options), world_(std::move(connection), options) {}

  const bootstrap::Connection& connection() const { return world_.connection(); }
  const Identity& identity() const { return connection().identity; }
  const CommunicatorOptions& options() const { return options_; }
  // Only the world's plan changes: options() stays what the communicator was created with,
  // which splits (on other threads) read.
  void retune(const CommunicatorOptions& options) { world_.setOptions(options); }
  int size() const { return world_.size(); }
  int rank() const { return world_.rank(); }
  const collectives::Group& world() const { return world_; }
  transport::Transport* transport() { return connection().transport.get(); }
  std::vector<std::byte>& prescaled() { return prescaled_; }

  void checkUsable() const {
    if (broken_) rethrowAs(*broken_);
  }

  // Runs one collective on the world: numbers it, records it, and turns the first failure into
  // a broken communicator (fail).
  template <typename Body>
  void collective(CollectiveKind kind, std::string_view name, size_t bytes, Body body) {
    checkUsable();
    collectives::Context ctx = world_.next(kind, name);
    const uint32_t sequence = world_.sequence();
    recorder_.start(sequence, name, bytes);
    try {
      body(ctx);
      recorder_.finish(sequence);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kInternal) throw;
      fail(e);
    }
  }

  // The same, through the hierarchy when the plan says so (`hierarchical` gets the Hierarchy).
  template <typename Flat, typename Hierarchical>
  void collective(CollectiveKind kind, std::string_view name, size_t bytes, const collectives::Plan& plan, Flat flat,
                  Hierarchical hierarchical) {
    if (plan.algorithm != collectives::Algorithm::kHierarchical) return collective(kind, name, bytes, flat);
    collectives::Hierarchy& h = hierarchy();
    collective(kind, name, bytes, [&](collectives::Context&) { hierarchical(h); });
  }

 private:
  // The one place a failure is reported: the error, extended with the other ranks' reports
  // (Note [failure reports]) and this rank's last collectives, breaks the communicator. A step
  // of a hierarchical collective fails here too, as the collective it is part of.
  [[noreturn]] void fail(const Error& e) {
    const bootstrap::Connection& c = connection();
    collectives::FailureReportOptions report{c.rank(), c.size(), c.rendezvous.prefix, std::chrono::milliseconds(500),
                                             [&c](int r) { return c.transport->describePeer(r); },
                                             [&c](int r) { return c.label(r); }};
    publishSilentPeers(c);
    const std::string me = "rank " + std::to_string(c.label(c.rank()));
    const std::string message = me + ": " + e.what() + "\n    " + me + "'s last collectives: " + recorder_.describe();
    broken_.emplace(e.kind(), collectives::reportFailure(*c.store, report, message, true));
    HORA_LOG(error, "{}", broken_->what());
    rethrowAs(*broken_);
  }

  // The heartbeat's verdicts, for horarun's elastic driver (Note [heartbeat]): it leaves those
  // ranks behind without waiting for its join window. Best effort, as the reports.
  static void publishSilentPeers(const bootstrap::Connection& c) {
    if (!c.silent || !c.silent->any()) return;
    try {
      const auto deadline = common::Deadline::after(std::chrono::milliseconds(500));
      for (int r = 0; r < c.size(); ++r)
        if (auto verdict = c.silent->verdictFor(r)) c.store->set(bootstrap::silentRankKey(c.rendezvous.prefix, r), *verdict, deadline);
    } catch (const Error& e) {
      HORA_LOG(debug, "could not publish the heartbeat's verdicts: {}", e.what());
    }
  }

  // The inner groups of the hierarchical collectives, connected by every rank at its first
  // hierarchical collective (the plan says when, alike on every rank).
  collectives::Hierarchy& hierarchy() {
    if (!hierarchy_) {
      hierarchy_ = collectives::Hierarchy::build(connection(), options_);
      HORA_LOG(info, "hierarchical collectives ready");
    }
    return *hierarchy_;
  }

  CommunicatorOptions options_;
  collectives::Group world_;
  collectives::FlightRecorder recorder_;
  std::vector<std::byte> prescaled_;
  std::optional<Error> broken_;
  std::unique_ptr<collectives::Hierarchy> hierarchy_;
};

}  // namespace detail

using detail::checkBuffer;
using detail::checkCounts;
using detail::checkedBytes;
using detail::checkType;

std::unique_ptr<Communicator> Communicator::fromEnvironment() {
  const auto env = common::Env::fromProcess();
  const CommunicatorOptions options = common::communicatorOptionsFrom(env);
  common::applyLogLevel(env);
  // Made from the environment, it checks that every rank's agrees on the job knobs (Note [knob
  // agreement]); one made from options (create) was given them.
  const bootstrap::Job job = bootstrap::resolveJob(env, options);
  return std::unique_ptr<Communicator>(new Communicator(std::make_unique<detail::CommunicatorImpl>(
      bootstrap::connect(job.identity, job.rendezvous, options, {}, &job.knobs), options)));
}

std::unique_ptr<Communicator> Communicator::create(const Identity& identity,
                                                   const RendezvousOptions& rendezvous,
                                                   const CommunicatorOptions& options) {
  return std::unique_ptr<Communicator>(new Communicator(
      std::make_unique<detail::CommunicatorImpl>(bootstrap::connect(identity, rendezvous, options), options)));
}

Communicator::Communicator(std::unique_ptr<detail::CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

const Identity& Communicator::identity() const { return impl_->identity(); }
const CommunicatorOptions& Communicator::options() const { return impl_->options(); }

Communicator::PlanTuning Communicator::planTuning() const {
  const CommunicatorOptions& o = impl_->world().options();
  const collectives::GroupShape& shape = impl_->world().shape();
  return {shape.shared_memory ? o.shm_ring_threshold_bytes : o.ring_threshold_bytes, o.hierarchical,
          o.hierarchical_allgather, shape.even_hosts, shape.shared_memory};
}

void Communicator::setPlanTuning(const PlanTuning& tuning) {
  CommunicatorOptions o = impl_->world().options();
  (impl_->world().shape().shared_memory ? o.shm_ring_threshold_bytes : o.ring_threshold_bytes) =
      tuning.ring_threshold_bytes;
  o.hierarchical = tuning.hierarchical_allreduce;
  o.hierarchical_allgather = tuning.hierarchical_allgather;
  impl_->retune(o);
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& members, const std::string& key) const {
  const auto bad = [&](const std::string& why) { throw InvalidArgumentError("split '" + key + "': " + why); };
  if (key.empty() || key.find('/') != std::string::npos) bad("the key must be non-empty and contain no '/'");
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size()) bad("rank " + std::to_string(members[i]) + " is out of range");
    if (i > 0 && members[i] <= members[i - 1]) bad("the members must be ascending and distinct");
  }
  const auto me = std::find(members.begin(), members.end(), rank());
  if (me == members.end()) bad("rank " + std::to_string(rank()) + " is not a member");
  return std::unique_ptr<Communicator>(new Communicator(std::make_unique<detail::CommunicatorImpl>(
      bootstrap::connectSubset(impl_->connection(), members, key, options()), options())));
}

void Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                             const AllreduceOptions& o) {
  constexpr std::string_view op = "allreduce";
  checkType(op, type);
  if (std::string why = whyRefused(CollectiveKind::kAllreduce, type, o, size()); !why.empty()) detail::invalid(op, why);
  checkBuffer(op, "send", send, count);
  checkBuffer(op, "recv", recv, count);
  const size_t bytes = checkedBytes(op, count, type);
  if (o.op == ReduceOp::kAdasum) {  // the tensors' counts must add up to this buffer
    if (std::string why = collectives::whyNotAdasum(size(), count, o.tensor_counts); !why.empty()) detail::invalid(op, why);
  } else if (!o.tensor_counts.empty()) {
    detail::invalid(op, "tensor_counts are for Adasum only");
  }
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
  const collectives::Plan plan = impl_->world().plan(CollectiveKind::kAllreduce, count, bytes, o.op);
  impl_->collective(
      CollectiveKind::kAllreduce, op, bytes, plan,
      [&](collectives::Context& ctx) { collectives::allreduce(ctx, plan.algorithm, in, out, count, type, o); },
      [&](collectives::Hierarchy& h) { h.allreduce(in, out, count, type, o, size()); });
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
  const size_t bytes = total * dataTypeSize(type);
  impl_->collective(
      CollectiveKind::kAllgather, op, bytes, impl_->world().plan(CollectiveKind::kAllgather, total, bytes),
      [&](collectives::Context& ctx) { collectives::ringAllgather(ctx, in, out, recv_counts, type); },
      [&](collectives::Hierarchy& h) { h.allgather(in, out, recv_counts, type); });
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
  const collectives::Plan plan = impl_->world().plan(CollectiveKind::kBroadcast, count, bytes);
  impl_->collective(
      CollectiveKind::kBroadcast, op, bytes, plan,
      [&](collectives::Context& ctx) {
        collectives::broadcast(ctx, plan.algorithm, static_cast<std::byte*>(buffer), bytes, root);
      },
      [&](collectives::Hierarchy& h) { h.broadcast(buffer, count, type, root); });
}

void Communicator::reducescatter(const void* send, void* recv, std::span<const size_t> recv_counts,
                                 DataType type, const AllreduceOptions& o) {
  constexpr std::string_view op = "reducescatter";
  checkType(op, type);
  if (std::string why = whyRefused(CollectiveKind::kReducescatter, type, o, size()); !why.empty()) detail::invalid(op, why);
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
  impl_->collective(CollectiveKind::kReducescatter, op, bytes, [&](collectives::Context& ctx) {
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
  impl_->collective(CollectiveKind::kAlltoall, op, send_total * dataTypeSize(type), [&](collectives::Context& ctx) {
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

std::string Communicator::algorithmFor(CollectiveKind collective, size_t bytes, ReduceOp op) const {
  if (collective == CollectiveKind::kJoin)
    throw InvalidArgumentError("algorithmFor: join is the engine's request, not a collective of the communicator");
  // (The element count is not known here; only tensors with fewer elements than ranks differ.)
  return impl_->world().describe(collective, impl_->world().plan(collective, SIZE_MAX, bytes, op));
}

std::string Communicator::whyRefused(CollectiveKind collective, DataType type, const AllreduceOptions& o, int ranks) {
  if (std::string why = collectives::whyNotReducible(type, o); !why.empty()) return why;
  if (o.op != ReduceOp::kAdasum) return {};
  if (collective != CollectiveKind::kAllreduce) return "Adasum is an allreduce only, as in Horovod";
  return collectives::whyNotAdasum(ranks, 0, {});
}

void Communicator::barrier() {
  impl_->checkUsable();
  if (size() == 1) return;
  impl_->collective(CollectiveKind::kBarrier, "barrier", 0,
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
