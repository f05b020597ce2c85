// ParameterServerClient (include/hora/ps.h): a worker's channels to every server, and the
// gathering of its tensors into each server's shard and back (sharding.h).
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <system_error>
#include <thread>
#include <variant>
#include <vector>

#include "bootstrap/job/horarun.h"
#include "bootstrap/job/job.h"
#include "common/config.h"
#include "common/knobs.h"
#include "hora/errors.h"
#include "hora/ps.h"
#include "ps/channel.h"
#include "ps/sharding.h"
#include "rendezvous/tcp_store.h"

namespace hora {

using ps::Channel;
using ps::MessageHeader;
using ps::MessageKind;

PsJob PsJob::fromEnvironment() {
  const auto env = common::Env::fromProcess();
  const Identity id = bootstrap::identityFrom(env);
  PsJob job;
  job.worker = id.rank;
  job.workers = id.size;
  job.servers = static_cast<int>(env.getInt("HORA_PS_SERVERS", 0, 4096));
  if (job.servers == 0)
    throw InvalidArgumentError("this job has no parameter servers (HORA_PS_SERVERS is 0 or unset): start it "
                               "with horarun --servers K");
  job.hostname = id.hostname;
  job.rendezvous = bootstrap::horarunStore(env, 2);  // the servers are always peers
  job.options = common::communicatorOptionsFrom(env);
  return job;
}

namespace {

// One server's part of a step: its reply (or the error it reported), or what its thread threw.
struct Exchange {
  std::variant<MessageHeader, Error> reply;
  std::exception_ptr thrown;
};

bool isTimeout(const std::exception_ptr& thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const Error& e) {
    return e.kind() == ErrorKind::kTimeout;
  } catch (...) {
    return false;
  }
}

}  // namespace

struct ParameterServerClient::Impl {
  PsJob job;
  PsOptions options;
  std::vector<size_t> elements;
  ps::ShardPlan plan;
  std::vector<std::unique_ptr<Channel>> channels;  // by server
  std::vector<std::vector<float>> buffers;         // by server: a shard's worth
  uint64_t step = 0;
  bool closed = false;
  std::optional<Error> broken;  // the first failure: the protocol's state is unknown after it

  void gather(size_t server, const std::vector<const float*>& tensors) {
    float* out = buffers[server].data();
    for (const ps::Piece& p : plan.servers[server]) {
      std::memcpy(out, tensors[p.tensor] + p.offset, p.count * sizeof(float));
      out += p.count;
    }
  }
  void scatter(size_t server, const std::vector<float*>& tensors) {
    const float* in = buffers[server].data();
    for (const ps::Piece& p : plan.servers[server]) {
      std::memcpy(tensors[p.tensor] + p.offset, in, p.count * sizeof(float));
      in += p.count;
    }
  }
  // The server's answer to the last request into buffers[server], or the error it reported.
  // A broken connection throws.
  std::variant<MessageHeader, Error> receiveReply(size_t server, bool may_be_empty, const common::Deadline& deadline) {
    Channel& c = *channels[server];
    const MessageHeader h = c.receiveHeader(deadline);
    if (h.kind == MessageKind::kError) {
      std::string text(h.bytes, '\0');
      c.receivePayload(text.data(), text.size(), deadline);
      return Error(static_cast<ErrorKind>(h.error_kind), text);
    }
    const size_t expected = buffers[server].size() * sizeof(float);
    if (h.kind != MessageKind::kReply || (h.bytes != expected && !(may_be_empty && h.bytes == 0)))
      c.fail(MismatchError(std::string("answered with a ") + ps::toString(h.kind) + " of " +
                           std::to_string(h.bytes) + " bytes where a reply of " + std::to_string(expected) +
                           " was due"));
    c.receivePayload(buffers[server].data(), h.bytes, deadline);
    return h;
  }
  // Every server's exchange of step `next` (the push of its shard, gathered already, then its reply,
  // scattered into `outputs`) on a thread of its own (the first on this one): pushed one after
  // another, the servers' links would carry the pushes in turn, each idle while the others fill
  // theirs, and S servers would push no faster than one. Each thread touches only its own
  // channel, its shard's buffer and its shard's slices of `outputs`, which no other shard
  // overlaps. Every wait in it ends at `deadline`, so the joins do too; what a thread throws is
  // kept for the caller.
  std::vector<Exchange> exchangeWithEveryServer(uint64_t next, const std::vector<float*>& outputs,
                                                const common::Deadline& deadline) {
    std::vector<Exchange> done(channels.size());
    const auto exchange = [&](size_t k) noexcept {
      try {
        MessageHeader h;
        h.kind = MessageKind::kPush;
        h.worker = static_cast<uint32_t>(job.worker);
        h.step = next;
        h.lr = static_cast<float>(options.lr);
        h.momentum = static_cast<float>(options.momentum);
        h.bytes = buffers[k].size() * sizeof(float);
        channels[k]->send(h, buffers[k].data(), deadline);
        done[k].reply = receiveReply(k, false, deadline);
        if (std::holds_alternative<MessageHeader>(done[k].reply)) scatter(k, outputs);
      } catch (...) {
        done[k].thrown = std::current_exception();
      }
    };
    std::vector<std::jthread> others;
    others.reserve(channels.size());
    for (size_t k = 1; k < channels.size(); ++k) {
      try {
        others.emplace_back(exchange, k);
      } catch (const std::system_error&) {
        // No thread to be had: this server's exchange here, in turn, rather than a step that
        // pushed to some servers only (the protocol could not go on from there).
        exchange(k);
      }
    }
    exchange(0);
    others.clear();  // joins
    return done;
  }
  template <typename Fn>
  auto guarded(Fn fn) {
    if (closed) throw ShutdownError("the parameter server client was closed");
    if (broken) rethrowAs(*broken);
    try {
      return fn();
    } catch (const Error& e) {
      broken = e;
      throw;
    }
  }
};

namespace {

// "parameter server 1 (host a, pid 42)": what the server published, for messages.
std::string describeServer(rendezvous::Store& store, const PsJob& job, int server, const common::Deadline& d) {
  const std::string name = "parameter server " + std::to_string(server);
  try {
    return name + " (" + store.get(job.rendezvous.prefix + "ps/server/" + std::to_string(server), d) + ")";
  } catch (const TimeoutError&) {
    throw TimeoutError("worker " + std::to_string(job.worker) + ": " + name + " did not start within " +
                       std::to_string(d.timeout().count()) + " ms");
  }
}

ps::Optimizer wireOptimizer(PsOptimizer optimizer) {
  switch (optimizer) {
    case PsOptimizer::kSgd: return ps::Optimizer::kSgd;
    case PsOptimizer::kAdam: return ps::Optimizer::kAdam;
    case PsOptimizer::kAdagrad: return ps::Optimizer::kAdagrad;
    case PsOptimizer::kRmsprop: return ps::Optimizer::kRmsprop;
  }
  throw InvalidArgumentError("unknown PsOptimizer " + std::to_string(static_cast<int>(optimizer)));
}

// What this worker registers with every server (but the shard's size, set per server).
ps::Registration registrationOf(const PsJob& job, const PsOptions& options, const std::vector<size_t>& elements) {
  ps::Registration r;
  r.mode = options.mode == PsMode::kSync ? ps::Mode::kSync : ps::Mode::kAsync;
  r.workers = static_cast<uint32_t>(job.workers);
  r.max_staleness = options.mode == PsMode::kAsync ? options.max_staleness : -1;
  r.lr = options.lr;
  r.momentum = options.momentum;
  r.keras_form = options.keras_form ? 1 : 0;
  r.optimizer = wireOptimizer(options.optimizer);
  r.beta1 = options.beta1;
  // RMSprop's decay of the mean square travels in Adam's beta2, the field of the same role.
  r.beta2 = options.optimizer == PsOptimizer::kRmsprop ? options.rho : options.beta2;
  r.epsilon = options.epsilon;
  r.centered = options.optimizer == PsOptimizer::kRmsprop && options.centered ? 1 : 0;
  r.lr_decay = options.optimizer == PsOptimizer::kAdagrad ? options.lr_decay : 0.0;
  r.initial_accumulator = options.optimizer == PsOptimizer::kAdagrad ? options.initial_accumulator_value : 0.0;
  r.average = options.average ? 1 : 0;
  r.layout_hash = ps::layoutHash(elements);
  return r;
}

}  // namespace

std::string asyncMomentumWarning(int workers, double momentum) {
  if (workers < 4 || momentum < 0.9) return "";
  const double implicit = 1.0 - 1.0 / workers;
  char figures[160];
  std::snprintf(figures, sizeof(figures), "%d workers and momentum %g: asynchrony alone acts as momentum of about "
                "1 - 1/%d = %.2f", workers, momentum, workers, implicit);
  return std::string("ps-async with ") + figures + ", and the two compound (8 workers with momentum 0.9 "
         "collapsed to a constant output where 0.5 converged); consider a momentum of 0.5 or less, or a smaller "
         "lr. See docs/parameter_servers.md, section \"ps-async and momentum: why 8 workers collapsed\"";
}

ParameterServerClient::ParameterServerClient(const PsJob& job, const std::vector<size_t>& tensor_elements,
                                             const PsOptions& options, const std::vector<float*>& initial)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (job.servers < 1) throw InvalidArgumentError("a parameter server client needs at least one server");
  if (job.worker < 0 || job.worker >= job.workers)
    throw InvalidArgumentError("worker " + std::to_string(job.worker) + " outside 0.." + std::to_string(job.workers - 1));
  if (options.mode == PsMode::kAsync && initial.size() != tensor_elements.size())
    throw InvalidArgumentError("ps-async needs the initial parameters of every tensor (" +
                               std::to_string(tensor_elements.size()) + "), got " + std::to_string(initial.size()));
  s.job = job;
  s.job.options.spin = s.job.options.shm_spin = std::chrono::microseconds(0);  // see quiet() in server.cc
  s.options = options;
  s.elements = tensor_elements;
  s.plan = ps::planShards(tensor_elements, job.servers);
  const auto deadline = common::Deadline::after(job.options.timeout);
  rendezvous::TcpStore store(job.rendezvous.address, job.rendezvous.port, job.rendezvous.secret, deadline);
  for (int k = 0; k < job.servers; ++k) {
    const std::string who = describeServer(store, job, k, deadline);
    s.channels.push_back(std::make_unique<Channel>(Channel::Side::kWorker, k, job.worker, job.hostname,
                                                   job.rendezvous, s.job.options, who));
    s.buffers.emplace_back(s.plan.shardElements(static_cast<size_t>(k)));
  }
  ps::Registration r = registrationOf(job, options, tensor_elements);
  s.guarded([&] {
    for (size_t k = 0; k < s.channels.size(); ++k) {
      r.shard_elements = s.buffers[k].size();
      std::vector<std::byte> payload(sizeof(r));
      std::memcpy(payload.data(), &r, sizeof(r));
      if (options.mode == PsMode::kAsync) {
        s.gather(k, std::vector<const float*>(initial.begin(), initial.end()));
        const auto* bytes = reinterpret_cast<const std::byte*>(s.buffers[k].data());
        payload.insert(payload.end(), bytes, bytes + s.buffers[k].size() * sizeof(float));
      }
      MessageHeader h;
      h.kind = MessageKind::kRegister;
      h.worker = static_cast<uint32_t>(job.worker);
      h.bytes = payload.size();
      s.channels[k]->send(h, payload.data(), deadline);
    }
    for (size_t k = 0; k < s.channels.size(); ++k) {
      auto reply = s.receiveReply(k, options.mode == PsMode::kSync, deadline);
      if (auto* e = std::get_if<Error>(&reply)) rethrowAs(*e);
      if (options.mode == PsMode::kAsync) s.scatter(k, initial);
    }
    return 0;
  });
}

ParameterServerClient::~ParameterServerClient() {
  if (impl_) close();
}
ParameterServerClient::ParameterServerClient(ParameterServerClient&&) noexcept = default;
ParameterServerClient& ParameterServerClient::operator=(ParameterServerClient&&) noexcept = default;

int ParameterServerClient::servers() const { return static_cast<int>(impl_->channels.size()); }

void ParameterServerClient::setSgd(double lr, double momentum) {
  impl_->options.lr = lr;
  impl_->options.momentum = momentum;
}

PsStep ParameterServerClient::step(const std::vector<const float*>& gradients, const std::vector<float*>& outputs) {
  Impl& s = *impl_;
  if (gradients.size() != s.elements.size() || outputs.size() != s.elements.size())
    throw InvalidArgumentError("step: " + std::to_string(s.elements.size()) + " tensors were registered, got " +
                               std::to_string(gradients.size()) + " gradients and " +
                               std::to_string(outputs.size()) + " outputs");
  return s.guarded([&] {
    const auto deadline = common::Deadline::after(s.job.options.timeout);
    const uint64_t step = s.step + 1;
    // Every gradient is read before any output is written (as when the pushes went in turn):
    // `outputs` may then overlap `gradients` in any way, not only be them. A memcpy of the model.
    for (size_t k = 0; k < s.channels.size(); ++k) s.gather(k, gradients);
    const std::vector<Exchange> done = s.exchangeWithEveryServer(step, outputs, deadline);
    // A server's reported error (a worker left a sync round) is often the echo of another
    // server's death: what a thread threw (a broken connection, the cause) goes first, and of
    // those, one that is not a timeout (another server's wait may have run out meanwhile).
    const Exchange* first = nullptr;
    for (const Exchange& e : done)
      if (e.thrown && (!first || (isTimeout(first->thrown) && !isTimeout(e.thrown)))) first = &e;
    if (first) std::rethrow_exception(first->thrown);
    PsStep result{step, UINT64_MAX, 0};
    for (size_t k = 0; k < done.size(); ++k) {
      if (const auto* e = std::get_if<Error>(&done[k].reply)) rethrowAs(*e);
      const MessageHeader& h = std::get<MessageHeader>(done[k].reply);
      result.slowest = std::min(result.slowest, h.slowest);
      if (k == 0) result.version = h.version;
    }
    s.step = step;
    return result;
  });
}

void ParameterServerClient::close() {
  Impl& s = *impl_;
  if (s.closed) return;
  s.closed = true;
  // Even after a failure, every server still reachable hears that this worker is done (a
  // server cannot tell a finished worker that only closed its connection from one that computes).
  {
    for (auto& c : s.channels) {
      if (c->broken()) continue;
      try {
        MessageHeader h;
        h.kind = MessageKind::kBye;
        h.worker = static_cast<uint32_t>(s.job.worker);
        c->send(h, nullptr, common::Deadline::after(std::chrono::seconds(5)));
      } catch (const Error&) {
        // The server is gone already: nothing to tell it.
      }
    }
  }
  s.channels.clear();  // each transport says goodbye as it closes
}

}  // namespace hora
