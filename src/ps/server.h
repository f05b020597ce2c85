// Server: one parameter server process's work: a session thread per worker around one ShardState.
//
// Each session connects its worker's Channel (waiting up to start_timeout for the worker to
// come), then answers its messages one at a time: register, push (the reply may wait for the
// other workers: ShardState), bye. A session ends at bye, or when the connection breaks (the
// worker died: ShardState::leave names it to the others). Errors a request causes (a mismatch, a
// timeout, a dead worker in a sync job) go back to that worker as a kError message and the
// session goes on, so every worker hears why.
//
// Lifetime: the constructor starts the sessions; wait() joins them; stop() (any thread, or the
// destructor) wakes every session and ends it. Sessions never throw across their thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/socket.h"
#include "hora/options.h"
#include "ps/shard_state.h"
#include "ps/sharding.h"

namespace hora::ps {

class Channel;

// Set in the job's store (under its prefix) once a worker registered in ps-async mode: horarun
// then lets the job go on when a worker dies (launcher/ps_servers.h), as the servers do.
inline constexpr const char* kAsyncJobKey = "ps/async";

struct ServerOptions {
  int index = 0;    // this server's number, 0 .. servers-1
  int workers = 1;
  std::string hostname;
  RendezvousOptions rendezvous;  // the job's store
  CommunicatorOptions options;   // options.timeout bounds every reply's wait
  std::chrono::milliseconds start_timeout{600000};  // for each worker to connect

  // From HORA_PS_SERVER_INDEX, HORA_SIZE (the workers), HORA_HOSTNAME, the rendezvous variables,
  // HORA_PS_START_TIMEOUT_SECONDS and, in an elastic job, HORA_PS_GENERATION (the store prefix).
  static ServerOptions fromEnvironment();
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Until every session has ended. Returns 0 when every worker said goodbye, or (async) when the
  // others did and some died; 1 otherwise (a worker never came, or died in a sync job).
  int wait();
  void stop();

  const ShardState& state() const { return state_; }
  const std::string& name() const { return name_; }

 private:
  void session(int worker);
  // What a session keeps between requests.
  struct Session {
    uint64_t step = 0;            // the worker's last answered push
    ShardLayout layout;           // the shard's float64 and float32 elements, from the registration
    bool registered = false;
    // The step's pushed parts, gathered as the layout places them (the float64 values first, so
    // 8-byte aligned as new[] aligns the buffer).
    std::vector<std::byte> gradient;
    size_t received = 0;          // elements of the step under way received so far
    uint64_t part_step = 0;       // the step its first part named
    bool fp16 = false;            // pushes and sync replies travel as float16
    std::vector<uint16_t> wire;   // fp16: a part as it came, a reply as it goes
    std::vector<std::byte> joined;  // a reply of several pieces, joined (sendReply in server.cc)
  };
  // One request of `worker`; false when the session should end.
  bool serve(Channel& channel, int worker, Session& session);
  // A registration, answered with the parameters (async) or an error.
  void receiveRegistration(Channel& channel, int worker, const MessageHeader& h, Session& session,
                           const common::Deadline& deadline);
  // A state request, answered with the optimizer's slots (Note [optimizer state]).
  void sendState(Channel& channel, int worker, Session& session, const common::Deadline& deadline);
  // A part of a push; when it completes the shard, the step is pushed and answered.
  void receivePart(Channel& channel, int worker, const MessageHeader& h, Session& session,
                   const common::Deadline& deadline);
  // Sets kAsyncJobKey once; a store that does not answer only costs the job its tolerance.
  void announceAsync();

  const ServerOptions options_;
  const std::string name_;
  ShardState state_;
  common::Fd wake_;  // eventfd: readable once stop() was called
  std::atomic<bool> stopping_{false};
  std::atomic<int> failed_sessions_{0};
  std::once_flag async_announced_;  // kAsyncJobKey set
  std::vector<std::thread> sessions_;
};

// The process `horarun --ps-server` runs: a Server from the environment until its workers leave.
int runServerFromEnvironment();

}  // namespace hora::ps
