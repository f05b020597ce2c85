#include "ps/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

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

// `wire` (not null): the values go as float16, narrowed into it (a sync reply of an fp16 job).
void sendReply(Channel& channel, int worker, const ReplyData& r, const common::Deadline& deadline,
               std::vector<uint16_t>* wire = nullptr) {
  MessageHeader h;
  h.kind = MessageKind::kReply;
  h.worker = static_cast<uint32_t>(worker);
  h.step = r.step;
  h.slowest = r.slowest;
  h.version = r.version;
  if (!wire) {
    h.bytes = r.values.size() * sizeof(float);
    channel.send(h, r.values.data(), deadline);
    return;
  }
  wire->resize(r.values.size());
  for (size_t i = 0; i < r.values.size(); ++i) (*wire)[i] = common::Half::fromFloat(r.values[i]);
  h.bytes = wire->size() * sizeof(uint16_t);
  channel.send(h, wire->data(), deadline);
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
    case MessageKind::kRegister: {
      if (h.bytes < sizeof(Registration) || (h.bytes - sizeof(Registration)) % sizeof(float) != 0)
        channel.fail(MismatchError("sent a registration of " + std::to_string(h.bytes) + " bytes"));
      std::vector<std::byte> payload(h.bytes);
      channel.receivePayload(payload.data(), payload.size(), deadline);
      Registration r;
      std::memcpy(&r, payload.data(), sizeof(r));
      std::vector<float> initial((h.bytes - sizeof(Registration)) / sizeof(float));
      if (!initial.empty())  // (a worker that sends no parameters: no memcpy from a null data())
        std::memcpy(initial.data(), payload.data() + sizeof(r), initial.size() * sizeof(float));
      try {
        const std::vector<float> parameters = state_.registerWorker(worker, r, std::move(initial), deadline);
        if (state_.async()) announceAsync();
        // Allocated (and its pages touched) once per session: every push fills the whole shard.
        session.gradient.assign(r.shard_elements, 0.0f);
        session.shard = r.shard_elements;
        session.fp16 = r.fp16 != 0;
        session.registered = true;
        sendReply(channel, worker, {parameters, 0, 0, 0}, deadline);
      } catch (const Error& e) {
        sendError(channel, worker, e, deadline);
      }
      return true;
    }
    case MessageKind::kPush:
      receivePart(channel, worker, h, session, deadline);
      return true;
    case MessageKind::kState:
      if (h.bytes != 0) channel.fail(MismatchError("sent a state request of " + std::to_string(h.bytes) + " bytes"));
      try {
        const OptimizerState state = state_.optimizerState(worker);
        sendReply(channel, worker, {state.slots, state.step, 0, 0}, deadline);
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

void Server::receivePart(Channel& channel, int worker, const MessageHeader& h, Session& session,
                         const common::Deadline& deadline) {
  if (!session.registered) channel.fail(MismatchError("pushed before registering"));
  // Parts come in order (Note [overlapped pushes]): anything else is a broken client or garbage.
  const size_t element = session.fp16 ? sizeof(uint16_t) : sizeof(float);
  const size_t count = h.bytes / element;
  if (h.offset == 0) session.part_step = h.step;
  if (h.bytes % element != 0 || h.offset != session.received || count > session.shard - session.received ||
      h.step != session.part_step)
    channel.fail(MismatchError("pushed " + std::to_string(h.bytes) + " bytes at element " + std::to_string(h.offset) +
                               " of step " + std::to_string(h.step) + " where element " +
                               std::to_string(session.received) + " of a shard of " + std::to_string(session.shard) +
                               " was due"));
  if (count > 0 && session.fp16) {
    session.wire.resize(count);
    channel.receivePayload(session.wire.data(), h.bytes, deadline);
    float* out = session.gradient.data() + h.offset;
    for (size_t i = 0; i < count; ++i) out[i] = common::Half::toFloat(session.wire[i]);
  } else if (count > 0) {
    channel.receivePayload(session.gradient.data() + h.offset, h.bytes, deadline);
  }
  session.received += count;
  if (session.received < session.shard) return;  // more parts of this step to come
  session.received = 0;
  try {
    const ReplyData reply = state_.push(worker, h.step, session.gradient.data(), {h.lr, h.momentum}, deadline);
    // An async reply is the parameters: float32 always, or every pull would round the model.
    sendReply(channel, worker, reply, deadline, session.fp16 && !state_.async() ? &session.wire : nullptr);
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
