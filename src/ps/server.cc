#include "ps/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "bootstrap/job/elastic_join.h"
#include "bootstrap/job/horarun.h"
#include "bootstrap/job/job.h"
#include "common/config.h"
#include "common/half.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "ps/channel.h"
#include "rendezvous/tcp_store.h"

namespace hora::ps {

namespace {

// How often an idle session looks whether its worker closed the connection without a bye.
constexpr std::chrono::milliseconds kDepartureLook{250};

// A channel's waits never spin: a server's sessions would take cores from the workers they
// wait for, and a worker waits for a server that may be summing other workers' pushes.
CommunicatorOptions quiet(CommunicatorOptions o) {
  o.spin = std::chrono::microseconds(0);
  o.shm_spin = std::chrono::microseconds(0);
  return o;
}

void sendError(Channel& channel, int worker, const Error& e, const common::Deadline& deadline) {
  MessageHeader h;
  h.kind = MessageKind::kError;
  h.error_kind = static_cast<uint8_t>(e.kind());
  h.worker = static_cast<uint32_t>(worker);
  const std::string text = e.what();
  h.bytes = text.size();
  channel.send(h, text.data(), deadline);
}

// A reply whose payload is `pieces`, one after another: a shard's float64 values, then its
// float32 ones (ShardLayout), for each buffer it carries. The transport sends one buffer per
// message, so a payload of several non-empty pieces is joined in `joined` first; one is sent where
// it lies (a shard of one element type: no copy).
void sendReply(Channel& channel, MessageHeader h, const std::vector<std::span<const std::byte>>& pieces,
               std::vector<std::byte>& joined, const common::Deadline& deadline) {
  h.kind = MessageKind::kReply;
  h.bytes = 0;
  const std::byte* only = nullptr;
  size_t non_empty = 0;
  for (const auto& piece : pieces) {
    h.bytes += piece.size();
    if (!piece.empty()) ++non_empty, only = piece.data();
  }
  if (non_empty > 1) {
    joined.clear();
    for (const auto& piece : pieces) joined.insert(joined.end(), piece.begin(), piece.end());
    only = joined.data();
  }
  channel.send(h, only, deadline);
}

MessageHeader replyHeader(int worker, uint64_t step, uint64_t slowest, uint64_t version) {
  MessageHeader h;
  h.worker = static_cast<uint32_t>(worker);
  h.step = step;
  h.slowest = slowest;
  h.version = version;
  return h;
}

// A push's reply: its values as they are, or (`wire` not null: a sync reply of an fp16 job, whose
// shard is all float32) narrowed to float16 in `wire`.
void sendPushReply(Channel& channel, int worker, const ReplyData& r, std::vector<std::byte>& joined,
                   const common::Deadline& deadline, std::vector<uint16_t>* wire) {
  const MessageHeader h = replyHeader(worker, r.step, r.slowest, r.version);
  if (!wire) {
    sendReply(channel, h, {std::as_bytes(r.wide), std::as_bytes(r.values)}, joined, deadline);
    return;
  }
  wire->resize(r.values.size());
  for (size_t i = 0; i < r.values.size(); ++i) (*wire)[i] = common::Half::fromFloat(r.values[i]);
  sendReply(channel, h, {std::as_bytes(std::span<const uint16_t>(*wire))}, joined, deadline);
}

// A registration's payload after the Registration: for the parameters and then each optimizer
// slot, the shard's float64 values and its float32 ones (ShardLayout), split into the two types.
// A payload that is no whole number of shards goes to `narrow` as it is, for ShardState to refuse.
void splitInitial(const std::byte* data, size_t bytes, const ShardLayout& layout, std::vector<float>& narrow,
                  std::vector<double>& wide) {
  const size_t shard = layout.bytes();
  if (shard == 0 || bytes % shard != 0) {
    narrow.resize(bytes / sizeof(float));
    if (bytes > 0) std::memcpy(narrow.data(), data, narrow.size() * sizeof(float));
    return;
  }
  const size_t sets = bytes / shard;
  narrow.resize(sets * layout.narrow);
  wide.resize(sets * layout.wide);
  // (A shard of one type leaves the other's vector empty, with no storage memcpy may be given.)
  for (size_t set = 0; set < sets; ++set, data += shard) {
    if (layout.wide > 0) std::memcpy(wide.data() + set * layout.wide, data, layout.wide * sizeof(double));
    if (layout.narrow > 0)
      std::memcpy(narrow.data() + set * layout.narrow, data + layout.wide * sizeof(double),
                  layout.narrow * sizeof(float));
  }
}

}  // namespace

ServerOptions ServerOptions::fromEnvironment() {
  const auto env = common::Env::fromProcess();
  ServerOptions o;
  o.index = static_cast<int>(env.getInt("HORA_PS_SERVER_INDEX", 0, 4095));
  o.workers = static_cast<int>(env.getInt("HORA_SIZE", 1, 1 << 20));
  o.hostname = bootstrap::identityFrom(env).hostname;
  o.rendezvous = bootstrap::horarunStore(env, 2);  // a server always talks to its workers
  // An elastic job's servers serve one generation: their keys (and their workers' pairs) go under
  // its prefix, where nothing of another generation's servers can be found.
  if (env.isSet("HORA_PS_GENERATION"))
    o.rendezvous.prefix = bootstrap::generationPrefix(static_cast<int>(env.getInt("HORA_PS_GENERATION", 0, 1 << 30)));
  o.options = common::communicatorOptionsFrom(env);
  o.start_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(env.getDouble("HORA_PS_START_TIMEOUT_SECONDS", 0.001, 7 * 24 * 3600.0) * 1000));
  common::applyLogLevel(env);
  return o;
}

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      name_("parameter server " + std::to_string(options_.index)),
      state_(name_, options_.workers),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!wake_.valid()) throw InternalError(name_ + ": eventfd failed: " + std::strerror(errno));
  for (int w = 0; w < options_.workers; ++w) sessions_.emplace_back([this, w] { session(w); });
}

Server::~Server() {
  stop();
  for (auto& t : sessions_)
    if (t.joinable()) t.join();
}

void Server::stop() {
  stopping_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

int Server::wait() {
  for (auto& t : sessions_)
    if (t.joinable()) t.join();
  return failed_sessions_.load() == 0 ? 0 : 1;
}

void Server::session(int worker) {
  const std::string thread_name = "hora-ps-w" + std::to_string(worker);
  ::pthread_setname_np(::pthread_self(), thread_name.substr(0, 15).c_str());
  const std::string who = "worker " + std::to_string(worker);
  std::unique_ptr<Channel> channel;
  try {
    CommunicatorOptions connect = quiet(options_.options);
    connect.timeout = options_.start_timeout;  // workers connect when their optimizer is made
    channel = std::make_unique<Channel>(Channel::Side::kServer, options_.index, worker, options_.hostname,
                                        options_.rendezvous, connect, who);
  } catch (const Error& e) {
    HORA_LOG(error, "{}: {} never connected: {}", name_, who, e.what());
    ++failed_sessions_;
    state_.leave(worker, true, e.what());
    return;
  }
  Session state;
  try {
    while (serve(*channel, worker, state)) {
    }
  } catch (const Error& e) {
    if (stopping_) return;
    // The worker is gone (its connection broke) or broke the protocol.
    state_.leave(worker, true, e.what());
    if (state_.async()) {
      HORA_LOG(warn, "{}: {} is gone after step {}; the other workers go on: {}", name_, who, state.step, e.what());
    } else {
      HORA_LOG(error, "{}: {} is gone after step {}: {}", name_, who, state.step, e.what());
      ++failed_sessions_;
    }
  }
}

bool Server::serve(Channel& channel, int worker, Session& session) {
  // Between requests a worker computes for as long as it likes: wait without a deadline, but
  // wake for a broken connection (counts as incoming) or stop(), and look every kDepartureLook
  // whether the worker closed its connection without a bye (a client that failed half way
  // through connecting, say), which is no incoming message: a worker gone as any other.
  while (!channel.waitForIncoming(kDepartureLook, wake_.get())) {
    if (stopping_) return false;
    if (channel.peerDeparted())
      channel.fail(PeerError("closed its connection without saying goodbye (no bye message)"));
  }
  if (stopping_) return false;
  const auto deadline = common::Deadline::after(options_.options.timeout);
  const MessageHeader h = channel.receiveHeader(deadline);
  switch (h.kind) {
    case MessageKind::kRegister:
      receiveRegistration(channel, worker, h, session, deadline);
      return true;
    case MessageKind::kPush:
      receivePart(channel, worker, h, session, deadline);
      return true;
    case MessageKind::kState:
      if (h.bytes != 0) channel.fail(MismatchError("sent a state request of " + std::to_string(h.bytes) + " bytes"));
      try {
        sendState(channel, worker, session, deadline);
      } catch (const Error& e) {
        sendError(channel, worker, e, deadline);
      }
      return true;
    case MessageKind::kBye:
      state_.leave(worker, false, "");
      return false;
    default:
      channel.fail(MismatchError(std::string("sent a ") + toString(h.kind) + " message to a server"));
  }
  return false;
}

void Server::receiveRegistration(Channel& channel, int worker, const MessageHeader& h, Session& session,
                                 const common::Deadline& deadline) {
  if (h.bytes < sizeof(Registration) || (h.bytes - sizeof(Registration)) % sizeof(float) != 0)
    channel.fail(MismatchError("sent a registration of " + std::to_string(h.bytes) + " bytes"));
  std::vector<std::byte> payload(h.bytes);
  channel.receivePayload(payload.data(), payload.size(), deadline);
  Registration r;
  std::memcpy(&r, payload.data(), sizeof(r));
  const size_t wide = std::min(r.wide_elements, r.shard_elements);  // (more: registerWorker refuses it)
  const ShardLayout layout{wide, r.shard_elements - wide};
  std::vector<float> initial;
  std::vector<double> initial_wide;
  splitInitial(payload.data() + sizeof(r), h.bytes - sizeof(r), layout, initial, initial_wide);
  try {
    const ShardValues parameters =
        state_.registerWorker(worker, r, std::move(initial), deadline, std::move(initial_wide));
    if (state_.async()) announceAsync();
    // Allocated (and its pages touched) once per session: every push fills the whole shard.
    session.gradient.assign(layout.bytes(), std::byte{0});
    session.layout = layout;
    session.fp16 = r.fp16 != 0;
    session.registered = true;
    sendReply(channel, replyHeader(worker, 0, 0, 0),
              {std::as_bytes(std::span(parameters.wide)), std::as_bytes(std::span(parameters.narrow))}, session.joined,
              deadline);
  } catch (const Error& e) {
    sendError(channel, worker, e, deadline);
  }
}

void Server::sendState(Channel& channel, int worker, Session& session, const common::Deadline& deadline) {
  const OptimizerState state = state_.optimizerState(worker);
  // Slot after slot, each as a shard is laid out: its float64 values, then its float32 ones.
  const size_t wide = session.layout.wide, narrow = session.layout.narrow;
  const size_t slots = wide > 0 ? state.wide_slots.size() / wide : narrow > 0 ? state.slots.size() / narrow : 0;
  std::vector<std::span<const std::byte>> pieces;
  for (size_t j = 0; j < slots; ++j) {
    pieces.push_back(std::as_bytes(std::span(state.wide_slots).subspan(j * wide, wide)));
    pieces.push_back(std::as_bytes(std::span(state.slots).subspan(j * narrow, narrow)));
  }
  sendReply(channel, replyHeader(worker, state.step, 0, 0), pieces, session.joined, deadline);
}

void Server::receivePart(Channel& channel, int worker, const MessageHeader& h, Session& session,
                         const common::Deadline& deadline) {
  if (!session.registered) channel.fail(MismatchError("pushed before registering"));
  // Parts come in order (Note [overlapped pushes]): anything else is a broken client or garbage.
  // A part is elements [offset, end) of the shard: halves in an fp16 job (all float32), else each
  // element in its type (ShardLayout).
  const ShardLayout& layout = session.layout;
  const size_t start = std::min<size_t>(h.offset, layout.elements());
  const size_t end = session.fp16 ? (h.bytes % sizeof(uint16_t) == 0 ? start + h.bytes / sizeof(uint16_t) : SIZE_MAX)
                                  : layout.elementAt(layout.byteOf(start) + h.bytes);
  if (h.offset == 0) session.part_step = h.step;
  if (end == SIZE_MAX || h.offset != session.received || end > layout.elements() || h.step != session.part_step)
    channel.fail(MismatchError("pushed " + std::to_string(h.bytes) + " bytes at element " + std::to_string(h.offset) +
                               " of step " + std::to_string(h.step) + " where element " +
                               std::to_string(session.received) + " of a shard of " +
                               std::to_string(layout.elements()) + " was due"));
  const size_t count = end - start;
  std::byte* shard = session.gradient.data();
  auto* narrow = reinterpret_cast<float*>(shard + layout.byteOf(layout.wide));
  if (count > 0 && session.fp16) {
    session.wire.resize(count);
    channel.receivePayload(session.wire.data(), h.bytes, deadline);
    for (size_t i = 0; i < count; ++i) narrow[start + i] = common::Half::toFloat(session.wire[i]);
  } else if (count > 0) {
    channel.receivePayload(shard + layout.byteOf(start), h.bytes, deadline);
  }
  session.received += count;
  if (session.received < layout.elements()) return;  // more parts of this step to come
  session.received = 0;
  try {
    const ReplyData reply = state_.push(worker, h.step, narrow, {h.lr, h.momentum}, deadline,
                                        reinterpret_cast<const double*>(shard));
    // An async reply is the parameters: full precision always, or every pull would round the model.
    sendPushReply(channel, worker, reply, session.joined, deadline,
                  session.fp16 && !state_.async() ? &session.wire : nullptr);
    session.step = h.step;
  } catch (const Error& e) {
    sendError(channel, worker, e, deadline);
  }
}

void Server::announceAsync() {
  std::call_once(async_announced_, [this] {
    try {
      const auto deadline = common::Deadline::after(std::chrono::seconds(2));
      rendezvous::TcpStore store(options_.rendezvous.address, options_.rendezvous.port, options_.rendezvous.secret,
                                 deadline);
      store.set(options_.rendezvous.prefix + kAsyncJobKey, "1", deadline);
    } catch (const Error& e) {
      HORA_LOG(warn, "{}: cannot tell horarun that the job is asynchronous ({}): a worker's death will stop it",
               name_, e.what());
    }
  });
}

int runServerFromEnvironment() {
  // horarun stops the servers with SIGTERM once every worker has ended (launcher/ps_servers.h),
  // or stops the whole job after a failure, which it has reported already: either way nothing
  // is left to serve or to save.
  ::signal(SIGTERM, [](int) { ::_exit(0); });
  try {
    const ServerOptions o = ServerOptions::fromEnvironment();
    // For the workers' messages: which host and process a server number is.
    {
      const auto deadline = common::Deadline::after(o.options.timeout);
      rendezvous::TcpStore store(o.rendezvous.address, o.rendezvous.port, o.rendezvous.secret, deadline);
      store.set(o.rendezvous.prefix + "ps/server/" + std::to_string(o.index),
                "host " + o.hostname + ", pid " + std::to_string(::getpid()), deadline);
    }
    HORA_LOG(info, "parameter server {} on {} serves {} workers", o.index, o.hostname, o.workers);
    Server server(o);
    return server.wait();
  } catch (const Error& e) {
    HORA_LOG(error, "parameter server: {}", e.what());
    return 1;
  }
}

}  // namespace hora::ps
