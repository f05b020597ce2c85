// ParameterServerClient (include/hora/ps.h): a worker's channels to every server, and the
// gathering of its tensors into each server's shard and back (sharding.h).
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "bootstrap/job/elastic_join.h"
#include "bootstrap/job/horarun.h"
#include "bootstrap/job/job.h"
#include "common/config.h"
#include "common/half.h"
#include "common/knobs.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "hora/ps.h"
#include "ps/channel.h"
#include "ps/nadam.h"
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
  job.compensate_momentum = env.getBool("HORA_PS_COMPENSATE_MOMENTUM");
  return job;
}

PsJob PsJob::inGeneration(int generation, int rank, int size) const {
  if (generation < 0) throw InvalidArgumentError("elastic generation " + std::to_string(generation) + " < 0");
  PsJob job = *this;
  job.worker = rank;
  job.workers = size;
  job.rendezvous.prefix = bootstrap::generationPrefix(generation);
  return job;
}

// Note [overlapped pushes]: a frontend that learns of each gradient as the backward pass
// produces it (hora.torch's hooks) calls ready() for it, and the push of the step goes out in
// parts while the pass goes on. Each server has a lane, a thread of the client that sends the
// ready prefix of that server's shard as soon as it holds HORA_BUCKET_BYTES or ends the shard.
// A shard's pieces are in reverse registration order (sharding.h), about the order in which a
// backward pass produces gradients, so the prefix grows during the pass. The server gathers the
// parts and answers the step once the last is in, as it answered a whole push (server.cc).
// step() readies the rest and waits for every lane. The lanes scatter their replies into the
// outputs only once every lane has sent its last part, so every gradient is read before any
// output is written and the outputs may overlap the gradients in any way. A frontend without
// hooks calls step() alone, and the lanes push the whole shards in parallel: pushed one after
// another, the servers' links would carry the pushes in turn and S servers would push no faster
// than one.

namespace {

// One server's part of a step: its reply (or the error it reported), or what its lane threw.
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

// The lock released for a scope, and taken back however the scope ends.
class Unlocked {
 public:
  explicit Unlocked(std::unique_lock<std::mutex>& lock) : lock_(lock) { lock_.unlock(); }
  ~Unlocked() { lock_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  std::unique_lock<std::mutex>& lock_;
};

// A server's lane: what its thread and the readying threads share of the step under way.
struct Lane {
  std::condition_variable wake;  // the step begins, its ready prefix grows, outputs come, stop
  size_t ready_end = 0;          // pieces [0, ready_end) of the shard are ready
  size_t ready_elements = 0;     // their elements
  size_t sent_elements = 0;      // of those, sent
  bool sent = false;             // its last part is out, or it failed: it reads no gradient more
  bool done = false;             // the step's exchange with this server ended, as `result` says
  Exchange result;

  void reset() {
    ready_end = ready_elements = sent_elements = 0;
    sent = done = false;
    result = {};
  }
};

}  // namespace

struct ParameterServerClient::Impl {
  PsJob job;
  PsOptions options;  // lr and momentum: guarded by mutex (the lanes read them)
  std::vector<size_t> elements;
  ps::ShardPlan plan;
  std::vector<std::vector<size_t>> servers_of;     // by tensor: the servers holding a piece of it
  size_t part_elements = 0;                        // HORA_BUCKET_BYTES, in floats
  std::vector<std::unique_ptr<Channel>> channels;  // by server; the lanes' during a step
  std::vector<ps::ShardLayout> layouts;            // by server: its shard's float64 and float32 elements
  std::vector<std::vector<std::byte>> buffers;     // by server: a shard's worth, as its layout places it
  std::vector<std::vector<uint16_t>> wire;         // by server, options.fp16: the shard as float16
  uint64_t step = 0;
  bool closed = false;
  std::optional<Error> broken;  // the first failure: the protocol's state is unknown after it

  // The step under way, shared with the lanes (Note [overlapped pushes]).
  std::mutex mutex;
  std::condition_variable all_done;
  std::vector<const void*> ready;              // by tensor: its gradient once readied, else null
  bool under_way = false;                      // the step's first tensor was readied
  uint64_t exchange_step = 0;                  // the step the lanes work on
  const std::vector<void*>* outputs = nullptr;  // step()'s, once every tensor is ready
  size_t lanes_sent = 0;
  bool stopping = false;
  std::vector<std::unique_ptr<Lane>> lanes;    // by server
  std::vector<std::thread> threads;            // by server: the lanes' threads
  // Readable once stopLanes() began: wakes a lane that waits for its reply unlocked, so that a
  // close() during a step (an exception between the backward pass and step(), say) returns now
  // rather than at the timeout, when the reply may never come.
  common::Fd stop_fd{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  std::atomic<bool> stop_requested{false};

  ~Impl() { stopLanes(); }

  // Bytes of one element of piece `p`, and where the piece's elements begin in its tensor.
  static size_t elementBytes(const ps::Piece& p) { return p.wide ? sizeof(double) : sizeof(float); }
  static size_t tensorByte(const ps::Piece& p) { return p.offset * elementBytes(p); }
  void gather(size_t server, const std::vector<const void*>& tensors) {
    std::byte* out = buffers[server].data();
    for (const ps::Piece& p : plan.servers[server]) {
      std::memcpy(out, static_cast<const std::byte*>(tensors[p.tensor]) + tensorByte(p), p.count * elementBytes(p));
      out += p.count * elementBytes(p);
    }
  }
  void scatter(size_t server, const std::vector<void*>& tensors) { scatter(server, buffers[server].data(), tensors); }
  void scatter(size_t server, const std::byte* in, const std::vector<void*>& tensors) {
    for (const ps::Piece& p : plan.servers[server]) {
      std::memcpy(static_cast<std::byte*>(tensors[p.tensor]) + tensorByte(p), in, p.count * elementBytes(p));
      in += p.count * elementBytes(p);
    }
  }
  // What server k is registered with: `r` for its shard, then (kAsync) its shard of the
  // parameters and of each slot of the initial state (Note [optimizer state] in messages.h).
  std::vector<std::byte> registrationPayload(size_t k, ps::Registration r, const std::vector<void*>& initial,
                                             const PsOptimizerState* initial_state) {
    r.shard_elements = layouts[k].elements();
    r.wide_elements = layouts[k].wide;
    std::vector<std::byte> payload(sizeof(r));
    std::memcpy(payload.data(), &r, sizeof(r));
    if (options.mode != PsMode::kAsync) return payload;
    std::vector<std::vector<const void*>> sets{{initial.begin(), initial.end()}};
    if (initial_state)
      for (const auto& slot : initial_state->slots) sets.emplace_back(slot.begin(), slot.end());
    for (const auto& tensors : sets) {
      gather(k, tensors);
      payload.insert(payload.end(), buffers[k].begin(), buffers[k].end());
    }
    return payload;
  }
  // The error a server reported in a kError message whose header `h` was received.
  static Error reportedError(Channel& c, const MessageHeader& h, const common::Deadline& deadline) {
    std::string text(h.bytes, '\0');
    c.receivePayload(text.data(), text.size(), deadline);
    return Error(static_cast<ErrorKind>(h.error_kind), text);
  }
  // The server's answer to the last request into buffers[server], or the error it reported.
  // `halves`: it comes as float16 (a sync reply of an fp16 job). A broken connection throws.
  std::variant<MessageHeader, Error> receiveReply(size_t server, bool may_be_empty, const common::Deadline& deadline,
                                                  bool halves = false) {
    Channel& c = *channels[server];
    const MessageHeader h = c.receiveHeader(deadline);
    if (h.kind == MessageKind::kError) return reportedError(c, h, deadline);
    std::vector<std::byte>& values = buffers[server];
    // (halves: an fp16 job's shard is all float32)
    const size_t expected = halves ? layouts[server].elements() * sizeof(uint16_t) : values.size();
    if (h.kind != MessageKind::kReply || (h.bytes != expected && !(may_be_empty && h.bytes == 0)))
      c.fail(MismatchError(std::string("answered with a ") + ps::toString(h.kind) + " of " +
                           std::to_string(h.bytes) + " bytes where a reply of " + std::to_string(expected) +
                           " was due"));
    if (!halves || h.bytes == 0) {
      c.receivePayload(values.data(), h.bytes, deadline);
      return h;
    }
    c.receivePayload(wire[server].data(), h.bytes, deadline);
    auto* floats = reinterpret_cast<float*>(values.data());
    for (size_t i = 0; i < wire[server].size(); ++i) floats[i] = common::Half::toFloat(wire[server][i]);
    return h;
  }
  // A reply of exactly values.size() bytes from server k into `values` (the optimizer's state),
  // or the error the server reported, rethrown.
  MessageHeader receiveInto(size_t k, std::vector<std::byte>& values, const common::Deadline& deadline) {
    Channel& c = *channels[k];
    const MessageHeader h = c.receiveHeader(deadline);
    if (h.kind == MessageKind::kError) rethrowAs(reportedError(c, h, deadline));
    if (h.kind != MessageKind::kReply || h.bytes != values.size())
      c.fail(MismatchError(std::string("answered with a ") + ps::toString(h.kind) + " of " + std::to_string(h.bytes) +
                           " bytes where the optimizer's state of " + std::to_string(values.size()) + " was due"));
    c.receivePayload(values.data(), h.bytes, deadline);
    return h;
  }
  // Pieces [first, end) of server k's shard, from the readied gradients, into the part of the
  // push that starts at element `offset`; returns where that part's bytes are.
  const void* gatherPart(size_t k, size_t first, size_t end, size_t offset) {
    const auto& pieces = plan.servers[k];
    if (options.fp16) {  // (float32 tensors only)
      uint16_t* out = wire[k].data() + offset;
      for (size_t i = first; i < end; ++i) {
        const float* in = static_cast<const float*>(ready[pieces[i].tensor]) + pieces[i].offset;
        for (size_t j = 0; j < pieces[i].count; ++j) out[j] = common::Half::fromFloat(in[j]);
        out += pieces[i].count;
      }
      return wire[k].data() + offset;
    }
    std::byte* const start = buffers[k].data() + layouts[k].byteOf(offset);
    std::byte* out = start;
    for (size_t i = first; i < end; ++i) {
      const ps::Piece& p = pieces[i];
      std::memcpy(out, static_cast<const std::byte*>(ready[p.tensor]) + tensorByte(p), p.count * elementBytes(p));
      out += p.count * elementBytes(p);
    }
    return start;
  }

  void startLanes() {
    servers_of.resize(elements.size());
    for (size_t k = 0; k < plan.servers.size(); ++k)
      for (const ps::Piece& p : plan.servers[k]) servers_of[p.tensor].push_back(k);
    ready.assign(elements.size(), nullptr);
    for (size_t k = 0; k < channels.size(); ++k) lanes.push_back(std::make_unique<Lane>());
    for (size_t k = 0; k < channels.size(); ++k) threads.emplace_back([this, k] { runLane(k); });
  }
  void stopLanes() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
      for (auto& lane : lanes) lane->wake.notify_all();
    }
    stop_requested = true;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd.get(), &one, sizeof(one));
    for (auto& t : threads) t.join();
    threads.clear();
  }

  // mutex held: the step's exchange begins (the lanes start pushing as tensors come ready).
  void begin() {
    under_way = true;
    exchange_step = step + 1;
    lanes_sent = 0;
    outputs = nullptr;
    for (auto& lane : lanes) {
      lane->reset();
      lane->wake.notify_one();
    }
  }
  // mutex held: tensor t's gradient is final for this step; wakes the lanes whose ready prefix
  // it completes a part of.
  void markReady(size_t t, const void* gradient) {
    if (ready[t])
      throw InvalidArgumentError("parameter server client: tensor " + std::to_string(t) + " was readied twice in step " +
                                 std::to_string(step + 1));
    if (!under_way) begin();
    ready[t] = gradient;
    for (size_t k : servers_of[t]) {
      Lane& lane = *lanes[k];
      const auto& pieces = plan.servers[k];
      const size_t before = lane.ready_end;
      while (lane.ready_end < pieces.size() && ready[pieces[lane.ready_end].tensor])
        lane.ready_elements += pieces[lane.ready_end++].count;
      if (lane.ready_end != before &&
          (lane.ready_end == pieces.size() || lane.ready_elements - lane.sent_elements >= part_elements))
        lane.wake.notify_one();
    }
  }
  // mutex held: lane k reads no gradient more; the last of the lanes lets them all scatter.
  void markSent(size_t k) {
    lanes[k]->sent = true;
    if (++lanes_sent == lanes.size())
      for (auto& lane : lanes) lane->wake.notify_one();
  }

  void runLane(size_t k) {
    const std::string name = "hora-ps-lane" + std::to_string(k);
    ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
    Lane& lane = *lanes[k];
    uint64_t served = 0;
    std::unique_lock lock(mutex);
    for (;;) {
      lane.wake.wait(lock, [&] { return stopping || exchange_step > served; });
      if (stopping) return;
      served = exchange_step;
      Exchange result;
      try {
        exchange(lock, k, served, result);
      } catch (...) {
        result.thrown = std::current_exception();
      }
      if (!lane.sent) markSent(k);
      lane.result = std::move(result);
      lane.done = true;
      all_done.notify_all();
    }
  }
  // mutex held (released while it sends, receives or copies): lane k's part of step `next`.
  void exchange(std::unique_lock<std::mutex>& lock, size_t k, uint64_t next, Exchange& result) {
    Lane& lane = *lanes[k];
    pushParts(lock, k, next);
    markSent(k);
    {
      Unlocked unlocked(lock);
      const auto deadline = common::Deadline::after(job.options.timeout);
      awaitReply(k, deadline);
      result.reply = receiveReply(k, false, deadline, options.fp16 && options.mode == PsMode::kSync);
    }
    lane.wake.wait(lock, [&] { return stopping || (outputs && lanes_sent == lanes.size()); });
    if (stopping) throw ShutdownError("the parameter server client was closed during a step");
    if (std::holds_alternative<MessageHeader>(result.reply)) {
      Unlocked unlocked(lock);
      scatter(k, *outputs);
    }
  }
  // Until server k's reply begins, the deadline passes (the receive then names the timeout), the
  // server left (the receive names how) or the client is closed (ShutdownError).
  void awaitReply(size_t k, const common::Deadline& deadline) {
    constexpr std::chrono::milliseconds kDepartureLook(200);  // a clean close wakes no wait
    Channel& c = *channels[k];
    while (!c.waitForIncoming(std::min(deadline.remaining(), kDepartureLook), stop_fd.get())) {
      if (deadline.expired() || c.peerDeparted()) return;
    }
    if (stop_requested) throw ShutdownError("the parameter server client was closed during a step");
  }
  // mutex held: sends server k's shard of step `next` in parts, each when its pieces are ready
  // and it holds part_elements or ends the shard (a shard of no elements: one empty part).
  void pushParts(std::unique_lock<std::mutex>& lock, size_t k, uint64_t next) {
    Lane& lane = *lanes[k];
    const auto& pieces = plan.servers[k];
    size_t first = 0;  // the first piece not sent
    do {
      lane.wake.wait(lock, [&] {
        return stopping || lane.ready_end == pieces.size() || lane.ready_elements - lane.sent_elements >= part_elements;
      });
      if (stopping) throw ShutdownError("the parameter server client was closed during a step");
      const size_t end = lane.ready_end, offset = lane.sent_elements, count = lane.ready_elements - offset;
      MessageHeader h;
      h.kind = MessageKind::kPush;
      h.worker = static_cast<uint32_t>(job.worker);
      h.step = next;
      h.lr = options.lr;  // the last part's are the ones applied
      h.momentum = options.momentum;
      h.offset = offset;
      h.bytes = options.fp16 ? count * sizeof(uint16_t) : layouts[k].byteOf(offset + count) - layouts[k].byteOf(offset);
      {
        Unlocked unlocked(lock);
        const void* part = gatherPart(k, first, end, offset);
        channels[k]->send(h, part, common::Deadline::after(job.options.timeout));
      }
      first = end;
      lane.sent_elements += count;
    } while (first < pieces.size());
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
    case PsOptimizer::kAdamax: return ps::Optimizer::kAdamax;
    case PsOptimizer::kAdadelta: return ps::Optimizer::kAdadelta;
    case PsOptimizer::kNadam: return ps::Optimizer::kNadam;
    case PsOptimizer::kRadam: return ps::Optimizer::kRadam;
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
  // RMSprop's and Adadelta's decay of the mean square travels in Adam's beta2, the field of the same role.
  const bool rho = options.optimizer == PsOptimizer::kRmsprop || options.optimizer == PsOptimizer::kAdadelta;
  r.beta2 = rho ? options.rho : options.beta2;
  r.epsilon = options.epsilon;
  r.centered = options.optimizer == PsOptimizer::kRmsprop && options.centered ? 1 : 0;
  r.lr_decay = options.optimizer == PsOptimizer::kAdagrad ? options.lr_decay
               : options.optimizer == PsOptimizer::kNadam ? options.momentum_decay  // (the field of a decay per step)
               : 0.0;
  r.nadam_twice = options.optimizer == PsOptimizer::kNadam && options.nadam_torch1_form ? 1 : 0;
  r.initial_accumulator = options.optimizer == PsOptimizer::kAdagrad ? options.initial_accumulator_value : 0.0;
  r.weight_decay = options.weight_decay;
  r.decoupled_weight_decay = options.decoupled_weight_decay ? 1 : 0;
  r.average = options.average ? 1 : 0;
  r.fp16 = options.fp16 ? 1 : 0;
  r.layout_hash = ps::layoutHash(elements, options.dtypes);
  return r;
}

// InvalidArgumentError for a client that cannot work.
void checkArguments(const PsJob& job, const PsOptions& options, size_t tensors, size_t initial) {
  if (job.servers < 1) throw InvalidArgumentError("a parameter server client needs at least one server");
  if (job.worker < 0 || job.worker >= job.workers)
    throw InvalidArgumentError("worker " + std::to_string(job.worker) + " outside 0.." + std::to_string(job.workers - 1));
  // An elastic worker's HORA_RANK is where it started, and its servers serve one generation: without
  // inGeneration() it would wait for servers that never come.
  if (job.rendezvous.prefix.empty() && common::Env::fromProcess().getBool("HORA_ELASTIC"))
    throw InvalidArgumentError("in an elastic job the parameter servers serve one generation each: connect with "
                               "PsJob::inGeneration(generation, rank, size) of the current generation "
                               "(the optimizers of hora.torch, hora.keras and hora::torch do)");
  if (options.mode == PsMode::kAsync && initial != tensors)
    throw InvalidArgumentError("ps-async needs the initial parameters of every tensor (" + std::to_string(tensors) +
                               "), got " + std::to_string(initial));
  if (!options.dtypes.empty() && options.dtypes.size() != tensors)
    throw InvalidArgumentError("parameter server client: " + std::to_string(options.dtypes.size()) + " dtypes for " +
                               std::to_string(tensors) + " tensors");
  for (size_t t = 0; t < options.dtypes.size(); ++t) {
    if (options.dtypes[t] != PsDtype::kFloat32 && options.dtypes[t] != PsDtype::kFloat64)
      throw InvalidArgumentError("parameter server client: tensor " + std::to_string(t) + " has an unknown dtype " +
                                 std::to_string(static_cast<int>(options.dtypes[t])));
    // float16 keeps 11 of float64's 53 bits: a float64 tensor's pushes are not compressed silently.
    if (options.fp16 && options.dtypes[t] == PsDtype::kFloat64)
      throw InvalidArgumentError("parameter server client: tensor " + std::to_string(t) +
                                 " is float64; fp16 compression takes float32 tensors only");
  }
}

// InvalidArgumentError unless `slots` are kAsync's optimizer's, a pointer per tensor each.
void checkSlots(const PsOptions& options, size_t tensors, const std::vector<std::vector<void*>>& slots,
                const char* what) {
  if (options.mode != PsMode::kAsync)
    throw InvalidArgumentError(std::string(what) + ": only ps-async servers hold an optimizer state");
  const int expected = psOptimizerSlots(options);
  if (slots.size() != static_cast<size_t>(expected))
    throw InvalidArgumentError(std::string(what) + ": the servers' " + ps::toString(wireOptimizer(options.optimizer)) +
                               " keeps " + std::to_string(expected) + " slots, got " + std::to_string(slots.size()));
  for (const auto& slot : slots)
    if (slot.size() != tensors)
      throw InvalidArgumentError(std::string(what) + ": a slot needs one buffer per tensor (" +
                                 std::to_string(tensors) + "), got " + std::to_string(slot.size()));
}

}  // namespace

int psOptimizerSlots(const PsOptions& options) {
  if (options.mode != PsMode::kAsync) return 0;
  return static_cast<int>(ps::slotsOf(wireOptimizer(options.optimizer), options.centered));
}

namespace {

// The momentum the servers apply where the optimizer asks for `momentum` (PsJob::compensate_momentum).
double appliedMomentum(const PsJob& job, const PsOptions& options, double momentum) {
  if (!job.compensate_momentum || options.mode != PsMode::kAsync) return momentum;
  return std::max(0.0, momentum - (1.0 - 1.0 / job.workers));
}

}  // namespace

std::string asyncMomentumWarning(int workers, double momentum) {
  // With the compensation the servers apply less: nothing to warn of.
  if (workers < 4 || momentum < 0.9) return "";
  if (common::Env::fromProcess().getBool("HORA_PS_COMPENSATE_MOMENTUM")) return "";
  const double implicit = 1.0 - 1.0 / workers;
  char figures[160];
  std::snprintf(figures, sizeof(figures), "%d workers and momentum %g: asynchrony alone acts as momentum of about "
                "1 - 1/%d = %.2f", workers, momentum, workers, implicit);
  return std::string("ps-async with ") + figures + ", and the two compound (8 workers with momentum 0.9 "
         "collapsed to a constant output where 0.5 converged); consider a momentum of 0.5 or less, a smaller "
         "lr, or HORA_PS_COMPENSATE_MOMENTUM=1. See docs/parameter_servers.md, section \"ps-async and "
         "momentum: why 8 workers collapsed\"";
}

ParameterServerClient::ParameterServerClient(const PsJob& job, const std::vector<size_t>& tensor_elements,
                                             const PsOptions& options, const std::vector<void*>& initial,
                                             const PsOptimizerState* initial_state)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  checkArguments(job, options, tensor_elements.size(), initial.size());
  if (initial_state) checkSlots(options, tensor_elements.size(), initial_state->slots, "initial_state");
  s.job = job;
  s.job.options.spin = s.job.options.shm_spin = std::chrono::microseconds(0);  // see quiet() in server.cc
  s.options = options;
  s.options.momentum = appliedMomentum(job, options, options.momentum);
  if (options.optimizer == PsOptimizer::kAdam || options.optimizer == PsOptimizer::kAdamax ||
      options.optimizer == PsOptimizer::kNadam || options.optimizer == PsOptimizer::kRadam)
    s.options.beta1 = appliedMomentum(job, options, options.beta1);  // the first moment's decay is a momentum
  s.elements = tensor_elements;
  s.plan = ps::planShards(tensor_elements, job.servers, options.dtypes);
  const auto deadline = common::Deadline::after(job.options.timeout);
  rendezvous::TcpStore store(job.rendezvous.address, job.rendezvous.port, job.rendezvous.secret, deadline);
  for (int k = 0; k < job.servers; ++k) {
    const std::string who = describeServer(store, job, k, deadline);
    s.channels.push_back(std::make_unique<Channel>(Channel::Side::kWorker, k, job.worker, job.hostname,
                                                   job.rendezvous, s.job.options, who));
    s.layouts.push_back(s.plan.layout(static_cast<size_t>(k)));
    s.buffers.emplace_back(s.layouts.back().bytes());
    s.wire.emplace_back(options.fp16 ? s.layouts.back().elements() : 0);
  }
  ps::Registration r = registrationOf(job, s.options, tensor_elements);
  if (initial_state) {
    r.slots = static_cast<uint32_t>(initial_state->slots.size());
    r.optimizer_step = initial_state->step;
  }
  s.guarded([&] {
    for (size_t k = 0; k < s.channels.size(); ++k) {
      const std::vector<std::byte> payload = s.registrationPayload(k, r, initial, initial_state);
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
  const auto env = common::Env::fromProcess();
  s.part_elements = std::max<size_t>(
      1, static_cast<size_t>(env.getBytes("HORA_BUCKET_BYTES", 0, int64_t{1} << 40)) / sizeof(float));
  s.startLanes();
}

ParameterServerClient::~ParameterServerClient() {
  if (impl_) close();
}
ParameterServerClient::ParameterServerClient(ParameterServerClient&&) noexcept = default;
ParameterServerClient& ParameterServerClient::operator=(ParameterServerClient&&) noexcept = default;

int ParameterServerClient::servers() const { return static_cast<int>(impl_->channels.size()); }
int ParameterServerClient::optimizerSlots() const { return psOptimizerSlots(impl_->options); }

double ParameterServerClient::nadamMomentumProduct(uint64_t step) const {
  return ps::nadamMomentumProduct(impl_->options.beta1, impl_->options.momentum_decay, step);
}

void ParameterServerClient::setSgd(double lr, double momentum) {
  std::lock_guard lock(impl_->mutex);
  impl_->options.lr = lr;
  impl_->options.momentum = appliedMomentum(impl_->job, impl_->options, momentum);
}

void ParameterServerClient::ready(size_t tensor, const void* gradient) {
  Impl& s = *impl_;
  if (tensor >= s.elements.size())
    throw InvalidArgumentError("parameter server client: tensor " + std::to_string(tensor) + " readied; " +
                               std::to_string(s.elements.size()) + " were registered");
  if (s.closed || s.broken) return;  // step() says why
  std::lock_guard lock(s.mutex);
  s.markReady(tensor, gradient);
}

PsStep ParameterServerClient::step(const std::vector<const void*>& gradients, const std::vector<void*>& outputs) {
  Impl& s = *impl_;
  if (gradients.size() != s.elements.size() || outputs.size() != s.elements.size())
    throw InvalidArgumentError("step: " + std::to_string(s.elements.size()) + " tensors were registered, got " +
                               std::to_string(gradients.size()) + " gradients and " +
                               std::to_string(outputs.size()) + " outputs");
  return s.guarded([&] {
    std::vector<Exchange> done;
    {
      std::unique_lock lock(s.mutex);
      if (!s.under_way) s.begin();
      for (size_t t = 0; t < gradients.size(); ++t)
        if (!s.ready[t]) s.markReady(t, gradients[t]);
      s.outputs = &outputs;
      for (auto& lane : s.lanes) lane->wake.notify_one();
      // No deadline of its own: every wait of a lane has one (Note [overlapped pushes]).
      s.all_done.wait(lock, [&] {
        return std::all_of(s.lanes.begin(), s.lanes.end(), [](const auto& lane) { return lane->done; });
      });
      for (auto& lane : s.lanes) done.push_back(std::move(lane->result));
      s.under_way = false;
      s.outputs = nullptr;
      std::fill(s.ready.begin(), s.ready.end(), nullptr);
    }
    // A server's reported error (a worker left a sync round) is often the echo of another
    // server's death: what a lane threw (a broken connection, the cause) goes first, and of
    // those, one that is not a timeout (another server's wait may have run out meanwhile).
    const Exchange* first = nullptr;
    for (const Exchange& e : done)
      if (e.thrown && (!first || (isTimeout(first->thrown) && !isTimeout(e.thrown)))) first = &e;
    if (first) std::rethrow_exception(first->thrown);
    PsStep result{s.step + 1, UINT64_MAX, 0};
    for (size_t k = 0; k < done.size(); ++k) {
      if (const auto* e = std::get_if<Error>(&done[k].reply)) rethrowAs(*e);
      const MessageHeader& h = std::get<MessageHeader>(done[k].reply);
      result.slowest = std::min(result.slowest, h.slowest);
      if (k == 0) result.version = h.version;
    }
    s.step = result.step;
    return result;
  });
}

uint64_t ParameterServerClient::pullOptimizerState(const std::vector<std::vector<void*>>& slots) {
  Impl& s = *impl_;
  checkSlots(s.options, s.elements.size(), slots, "pullOptimizerState");
  return s.guarded([&] {
    {
      std::lock_guard lock(s.mutex);  // the lanes use the channels during a step only
      if (s.under_way) throw InvalidArgumentError("pullOptimizerState: a step is under way (a tensor was readied)");
    }
    const auto deadline = common::Deadline::after(s.job.options.timeout);
    for (auto& c : s.channels) {
      MessageHeader h;
      h.kind = MessageKind::kState;
      h.worker = static_cast<uint32_t>(s.job.worker);
      c->send(h, nullptr, deadline);
    }
    uint64_t step = 0;
    std::vector<std::byte> state;
    for (size_t k = 0; k < s.channels.size(); ++k) {
      state.resize(slots.size() * s.buffers[k].size());  // slot after slot, each a shard
      const MessageHeader h = s.receiveInto(k, state, deadline);
      step = std::max(step, h.step);  // each server counts the pushes it applied
      for (size_t slot = 0; slot < slots.size(); ++slot)
        s.scatter(k, state.data() + slot * s.buffers[k].size(), slots[slot]);
    }
    return step;
  });
}

void ParameterServerClient::close() {
  Impl& s = *impl_;
  if (s.closed) return;
  s.closed = true;
  s.stopLanes();  // before the byes: the lanes use the channels during a step
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
