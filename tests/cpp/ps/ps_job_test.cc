// Parameter servers in whole jobs of worker and server processes (ranks 0..N-1 are workers,
// N..N+K-1 servers): every worker gets the mean, pushes overlap the backward pass, and a server or
// a worker killed or stopped in the middle of training is named by every worker in time.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/half.h"
#include "harness.h"
#include "hora/errors.h"
#include "hora/ps.h"
#include "ps/channel.h"
#include "ps/messages.h"
#include "ps/server.h"
#include "ps/sharding.h"
#include "rendezvous/tcp_store.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

PsJob workerJob(int rank, int workers, int servers) {
  PsJob job;
  job.worker = rank;
  job.workers = workers;
  job.servers = servers;
  const char* host = std::getenv("HORA_HOSTNAME");
  job.hostname = host ? host : "localhost";
  job.rendezvous.address = "127.0.0.1";
  job.rendezvous.port = std::atoi(std::getenv("HORA_RENDEZVOUS_PORT"));
  job.rendezvous.secret = std::getenv("HORA_SECRET");
  job.options = CommunicatorOptions::fromEnvironment();
  job.options.timeout = 10s;
  return job;
}

// The server side of a process job; exits with the server's status.
int runServerRole(int index, int workers) {
  ps::ServerOptions o;
  o.index = index;
  o.workers = workers;
  const PsJob job = workerJob(0, workers, 1);
  o.hostname = job.hostname;
  o.rendezvous = job.rendezvous;
  o.options = job.options;
  o.start_timeout = 20s;
  // Published as horarun's servers do (runServerFromEnvironment), for the workers' messages.
  rendezvous::TcpStore store(o.rendezvous.address, o.rendezvous.port, o.rendezvous.secret, common::Deadline::after(5s));
  store.set("ps/server/" + std::to_string(index), "host " + o.hostname + ", pid " + std::to_string(::getpid()),
            common::Deadline::after(5s));
  ps::Server server(o);
  const int status = server.wait();
  std::printf("server %d exits with %d\n", index, status);
  return status;
}

// Tensors whose largest is split across 2 servers; the gradient of worker w at step s is a
// closed form, so the mean is known exactly.
const std::vector<size_t> kSizes = {300, 7, 1, 33};
float gradientAt(int w, int s, size_t t, size_t i) {
  // (+ 0.01 (w + 1): no mean is a float16, so a reply that skipped float16 would be seen.)
  return static_cast<float>((w + 1) * 0.5 * static_cast<double>(i + 1) + static_cast<double>(t) + s + 0.01 * (w + 1));
}

float roundedToHalf(float x) { return common::Half::toFloat(common::Half::fromFloat(x)); }

// PS_READY: a worker readies tensors before step(), as hooks would, in an order of its own (the
// backward order, or another), leaving one to step() on odd ranks.
void readySome(ParameterServerClient& client, int rank, const std::vector<std::vector<float>>& grads) {
  const std::vector<size_t> order = rank % 2 == 0 ? std::vector<size_t>{3, 2, 1, 0} : std::vector<size_t>{1, 3, 0};
  for (size_t t : order) client.ready(t, grads[t].data());
  EXPECT_THROW(client.ready(order.front(), grads[order.front()].data()), InvalidArgumentError);
}

HORA_WORKER_SCENARIO(ps_sync_job) {
  const int rank = envInt("HORA_RANK", 0), workers = envInt("PS_WORKERS", 2), servers = envInt("PS_SERVERS", 1);
  if (rank >= workers) return runServerRole(rank - workers, workers);
  try {
    PsOptions options;
    options.fp16 = std::getenv("PS_FP16") != nullptr;
    ParameterServerClient client(workerJob(rank, workers, servers), kSizes, options);
    for (int s = 1; s <= 3; ++s) {
      std::vector<std::vector<float>> grads(kSizes.size());
      std::vector<const void*> in;
      std::vector<void*> out;
      for (size_t t = 0; t < kSizes.size(); ++t) {
        for (size_t i = 0; i < kSizes[t]; ++i) grads[t].push_back(gradientAt(rank, s, t, i));
        in.push_back(grads[t].data());
        out.push_back(grads[t].data());  // reduced in place, as hora.torch does
      }
      if (std::getenv("PS_READY")) readySome(client, rank, grads);
      client.step(in, out);
      for (size_t t = 0; t < kSizes.size(); ++t) {
        for (size_t i = 0; i < kSizes[t]; ++i) {
          double sum = 0;  // reference: the mean in double over every worker's closed form
          for (int w = 0; w < workers; ++w) {
            const float g = gradientAt(w, s, t, i);
            sum += options.fp16 ? roundedToHalf(g) : g;
          }
          const double mean = sum / workers;
          // fp16: pushed as float16, summed in float32, answered as float16 (11 significant bits).
          const double tolerance = options.fp16 ? std::abs(mean) / 1024 : 1e-5 * std::abs(mean);
          const bool half = roundedToHalf(grads[t][i]) == grads[t][i];
          if (std::abs(grads[t][i] - mean) > tolerance || (options.fp16 && !half)) {
            std::printf("MISMATCH step %d tensor %zu element %zu: %g vs %g\n", s, t, i, grads[t][i], mean);
            return 1;
          }
        }
      }
    }
    std::printf("worker %d ok\n", rank);
    return 0;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    return 10 + static_cast<int>(e.kind());
  }
}

struct SyncCase {
  int workers, servers;
  std::string transport;
  bool ready = false;  // tensors readied before step(), pushed in parts of 64 bytes
  bool fp16 = false;   // float16 on the wire
};

class PsSyncJob : public ::testing::TestWithParam<SyncCase> {};

TEST_P(PsSyncJob, EveryWorkerGetsTheMean) {
  const SyncCase c = GetParam();
  std::map<std::string, std::string> env = {
      {"PS_WORKERS", std::to_string(c.workers)}, {"PS_SERVERS", std::to_string(c.servers)}, {"HORA_TRANSPORT", c.transport}};
  if (c.ready) {
    env["PS_READY"] = "1";
    env["HORA_BUCKET_BYTES"] = "64";
  }
  if (c.fp16) env["PS_FP16"] = "1";
  ProcessJob job(c.workers + c.servers, "ps_sync_job", env);
  const auto outcomes = job.wait(60s);
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_EQ(outcomes[r].exit_code, 0) << "process " << r << ":\n" << outcomes[r].output;
}

INSTANTIATE_TEST_SUITE_P(Shapes, PsSyncJob,
                         ::testing::Values(SyncCase{2, 1, "auto"}, SyncCase{2, 2, "auto"}, SyncCase{3, 1, "auto"},
                                           SyncCase{3, 2, "auto"}, SyncCase{3, 2, "tcp"},
                                           SyncCase{3, 2, "auto", true}, SyncCase{2, 1, "tcp", true},
                                           SyncCase{3, 2, "auto", true, true}, SyncCase{2, 1, "tcp", false, true}),
                         [](const ::testing::TestParamInfo<SyncCase>& shape) {
                           return std::to_string(shape.param.workers) + "workers" +
                                  std::to_string(shape.param.servers) + "servers_" + shape.param.transport +
                                  (shape.param.ready ? "_readied_in_parts" : "") + (shape.param.fp16 ? "_fp16" : "");
                         });

// ready() pushes without step(): worker 1 readies every tensor, then steps only once worker 0's
// step has returned, which needs worker 1's whole push (worker 0 would time out otherwise).
HORA_WORKER_SCENARIO(ps_ready_job) {
  const int rank = envInt("HORA_RANK", 0);
  if (rank >= 2) return runServerRole(rank - 2, 2);
  try {
    const PsJob job = workerJob(rank, 2, 2);
    ParameterServerClient client(job, kSizes, PsOptions{});
    rendezvous::TcpStore store(job.rendezvous.address, job.rendezvous.port, job.rendezvous.secret,
                               common::Deadline::after(5s));
    std::vector<std::vector<float>> grads(kSizes.size());
    std::vector<const void*> in;
    std::vector<void*> out;
    for (size_t t = 0; t < kSizes.size(); ++t) {
      for (size_t i = 0; i < kSizes[t]; ++i) grads[t].push_back(static_cast<float>(rank + 1));
      in.push_back(grads[t].data());
      out.push_back(grads[t].data());
    }
    if (rank == 1) {
      for (size_t t = 0; t < kSizes.size(); ++t) client.ready(t, grads[t].data());
      store.get("worker 0 stepped", common::Deadline::after(20s));
    }
    client.step(in, out);
    if (rank == 0) store.set("worker 0 stepped", "1", common::Deadline::after(5s));
    for (const auto& g : grads)
      for (float v : g)
        if (v != 1.5f) return std::printf("MISMATCH: %g where the mean 1.5 was due\n", v), 1;
    std::printf("worker %d ok\n", rank);
    return 0;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    return 10 + static_cast<int>(e.kind());
  }
}

TEST(PsOverlap, ReadiedTensorsArePushedBeforeStep) {
  ProcessJob job(4, "ps_ready_job", {{"HORA_BUCKET_BYTES", "256"}});
  const auto outcomes = job.wait(60s);
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_EQ(outcomes[r].exit_code, 0) << "process " << r << ":\n" << outcomes[r].output;
}

// close() while a lane waits for a reply that cannot come (worker 0 pushed its whole step; worker
// 1 never pushes, as a worker whose script raised after its backward pass): the lanes stop now,
// not at the 60 s timeout.
HORA_WORKER_SCENARIO(ps_close_mid_step_job) {
  const int rank = envInt("HORA_RANK", 0);
  if (rank >= 2) return runServerRole(rank - 2, 2);
  try {
    PsJob job = workerJob(rank, 2, 1);
    job.options.timeout = 60s;
    rendezvous::TcpStore store(job.rendezvous.address, job.rendezvous.port, job.rendezvous.secret,
                               common::Deadline::after(5s));
    ParameterServerClient client(job, kSizes, PsOptions{});
    if (rank == 1) {
      store.get("worker 0 closed", common::Deadline::after(30s));
      return std::printf("worker 1 ok\n"), 0;
    }
    std::vector<std::vector<float>> grads;
    for (size_t n : kSizes) grads.emplace_back(n, 1.0f);
    for (size_t t = 0; t < kSizes.size(); ++t) client.ready(t, grads[t].data());
    std::this_thread::sleep_for(500ms);  // the lanes have pushed and wait for the reply
    const auto start = std::chrono::steady_clock::now();
    client.close();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    store.set("worker 0 closed", "1", common::Deadline::after(5s));
    std::printf("close took %lld ms\n", static_cast<long long>(took.count()));
    return took < 5s ? 0 : 1;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    return 10 + static_cast<int>(e.kind());
  }
}

TEST(PsOverlap, CloseDuringAStepDoesNotWaitForTheTimeout) {
  ProcessJob job(3, "ps_close_mid_step_job");
  const auto outcomes = job.wait(90s);
  for (size_t r = 0; r < 2; ++r)
    EXPECT_EQ(outcomes[r].exit_code, 0) << "process " << r << ":\n" << outcomes[r].output;
}

// A part that is not the one due (garbage, or a broken client): the server names it and drops
// the worker, and the other worker of the sync job hears of it instead of waiting.
HORA_WORKER_SCENARIO(ps_bad_part_job) {
  const int rank = envInt("HORA_RANK", 0);
  if (rank >= 2) return runServerRole(rank - 2, 2);
  const PsJob job = workerJob(rank, 2, 1);
  if (rank == 1) {
    ps::Channel channel(ps::Channel::Side::kWorker, 0, 1, job.hostname, job.rendezvous, job.options, "server");
    ps::Registration r;  // as worker 0's client sends it
    r.workers = 2;
    r.average = 1;
    r.shard_elements = 10;
    r.layout_hash = ps::layoutHash({10});
    ps::MessageHeader h;
    h.kind = ps::MessageKind::kRegister;
    h.worker = 1;
    h.bytes = sizeof(r);
    channel.send(h, &r, common::Deadline::after(5s));
    channel.receiveHeader(common::Deadline::after(5s));  // the (empty) sync reply
    const std::vector<float> part(4, 1.0f);
    h.kind = ps::MessageKind::kPush;
    h.step = 1;
    h.offset = 6;  // element 0 is due
    h.bytes = part.size() * sizeof(float);
    channel.send(h, part.data(), common::Deadline::after(5s));
    std::this_thread::sleep_for(2s);
    return 0;
  }
  try {
    ParameterServerClient client(job, {10}, PsOptions{});
    std::vector<float> g(10, 1.0f);
    client.step({g.data()}, {g.data()});
    std::printf("worker 0 stepped\n");
    return 0;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    return 10 + static_cast<int>(e.kind());
  }
}

TEST(PsOverlap, AnOutOfOrderPartIsNamedAndFailsTheJob) {
  ProcessJob job(3, "ps_bad_part_job", {});
  const auto outcomes = job.wait(60s);
  EXPECT_EQ(outcomes[0].exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << outcomes[0].output;
  EXPECT_NE(outcomes[0].output.find("worker 1 died"), std::string::npos) << outcomes[0].output;
  EXPECT_NE(outcomes[2].output.find("at element 6 of step 1 where element 0 of a shard of 10 was due"),
            std::string::npos)
      << outcomes[2].output;
}

// Workers step until killed or told to stop; they print each step so the test knows when to kill.
HORA_WORKER_SCENARIO(ps_stepping_job) {
  const int rank = envInt("HORA_RANK", 0), workers = envInt("PS_WORKERS", 2), servers = envInt("PS_SERVERS", 1);
  if (rank >= workers) return runServerRole(rank - workers, workers);
  const bool async = std::getenv("PS_ASYNC") != nullptr;
  if (rank == envInt("PS_RUDE_RANK", -1)) {
    // Connects to every server, then closes its connections cleanly but with no bye message,
    // as a client that failed half way through its start would.
    const PsJob job = workerJob(rank, workers, servers);
    std::vector<std::unique_ptr<ps::Channel>> channels;
    for (int k = 0; k < servers; ++k)
      channels.push_back(std::make_unique<ps::Channel>(ps::Channel::Side::kWorker, k, rank, job.hostname,
                                                       job.rendezvous, job.options, "server"));
    std::this_thread::sleep_for(std::chrono::milliseconds(envInt("PS_RUDE_AFTER_MS", 300)));
    channels.clear();
    std::printf("closed without bye\n");
    return 0;
  }
  const int steps = envInt("PS_STEPS", 100000);
  const int sleep_ms = envInt(("PS_SLEEP_MS_" + std::to_string(rank)).c_str(), 5);
  try {
    PsOptions options;
    options.mode = async ? PsMode::kAsync : PsMode::kSync;
    options.lr = 0.01;
    options.max_staleness = envInt("PS_STALENESS", -1);
    std::vector<std::vector<float>> params = {std::vector<float>(300, 1.0f), std::vector<float>(3, 1.0f)};
    std::vector<void*> p = {params[0].data(), params[1].data()};
    ParameterServerClient client(workerJob(rank, workers, servers), {300, 3}, options, p);
    std::vector<std::vector<float>> grads = {std::vector<float>(300, 0.5f), std::vector<float>(3, 0.5f)};
    const std::vector<const void*> g = {grads[0].data(), grads[1].data()};
    for (int s = 1; s <= steps; ++s) {
      client.step(g, async ? p : std::vector<void*>{grads[0].data(), grads[1].data()});
      std::printf("step %d\n", s);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    std::printf("worker %d done\n", rank);
    return 0;
  } catch (const Error& e) {
    std::printf("ERROR: %s\n", e.what());
    std::fflush(stdout);
    return 10 + static_cast<int>(e.kind());
  }
}

// A server killed in the middle of a sync job: every worker fails within seconds, naming it.
TEST(PsFaults, KilledServerIsNamedByEveryWorker) {
  for (const std::string transport : {"auto", "tcp"}) {
    ProcessJob job(4, "ps_stepping_job", {{"PS_WORKERS", "2"}, {"PS_SERVERS", "2"}, {"HORA_TRANSPORT", transport}});
    ASSERT_TRUE(job.waitForOutput(0, "step 3", 30s));
    ASSERT_TRUE(job.waitForOutput(1, "step 3", 30s));
    const auto killed_at = std::chrono::steady_clock::now();
    ::kill(job.pid(3), SIGKILL);  // parameter server 1
    const auto outcomes = job.wait(30s);
    for (int w = 0; w < 2; ++w) {
      const auto& o = outcomes[static_cast<size_t>(w)];
      EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << transport << " worker " << w << ":\n" << o.output;
      EXPECT_NE(o.output.find("parameter server 1 (host"), std::string::npos) << o.output;
      EXPECT_LT(o.ended - killed_at, 5s) << transport << " worker " << w << " took too long to notice";
    }
  }
}

// A server stopped (SIGSTOP) in the middle of a sync job keeps its connections open: every
// worker's exchange with it waits, the other server's answers, and the step still ends within
// the worker's deadline (10 s) in an error naming the stopped server, not in a hang.
TEST(PsFaults, StoppedServerIsNamedByEveryWorkerWithinTheDeadline) {
  ProcessJob job(4, "ps_stepping_job", {{"PS_WORKERS", "2"}, {"PS_SERVERS", "2"}});
  ASSERT_TRUE(job.waitForOutput(0, "step 3", 30s));
  ASSERT_TRUE(job.waitForOutput(1, "step 3", 30s));
  const auto stopped_at = std::chrono::steady_clock::now();
  ::kill(job.pid(3), SIGSTOP);  // parameter server 1
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(job.waitForOutput(w, "ERROR", 20s)) << "worker " << w << " did not fail";
  const auto failed_at = std::chrono::steady_clock::now();
  ::kill(job.pid(3), SIGKILL);
  const auto outcomes = job.wait(30s);
  EXPECT_LT(failed_at - stopped_at, 13s) << "the workers took longer than their deadline";
  for (int w = 0; w < 2; ++w) {
    const auto& o = outcomes[static_cast<size_t>(w)];
    EXPECT_TRUE(o.exit_code == 10 + static_cast<int>(ErrorKind::kPeer) ||
                o.exit_code == 10 + static_cast<int>(ErrorKind::kTimeout))
        << "worker " << w << ":\n" << o.output;
    EXPECT_NE(o.output.find("parameter server 1 (host"), std::string::npos) << o.output;
  }
}

// A worker killed in an async job with a staleness bound: the others are held by it only until
// the servers see it die, then finish; the servers exit cleanly.
TEST(PsFaults, KilledAsyncWorkerDoesNotStopTheOthers) {
  ProcessJob job(5, "ps_stepping_job",
                 {{"PS_WORKERS", "3"}, {"PS_SERVERS", "2"}, {"PS_ASYNC", "1"}, {"PS_STALENESS", "2"},
                  {"PS_STEPS", "40"}, {"PS_SLEEP_MS_2", "100000"}});
  ASSERT_TRUE(job.waitForOutput(2, "step 1", 30s));
  // Workers 0 and 1 cannot pass step 3 while worker 2 lives at step 1 (max_staleness 2).
  ASSERT_TRUE(job.waitForOutput(0, "step 3", 30s));
  ::kill(job.pid(2), SIGKILL);
  const auto outcomes = job.wait(60s);
  for (int r : {0, 1}) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << "worker " << r << ":\n" << outcomes[static_cast<size_t>(r)].output;
    EXPECT_NE(outcomes[static_cast<size_t>(r)].output.find("done"), std::string::npos);
  }
  for (int r : {3, 4}) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << "server " << r - 3 << ":\n" << outcomes[static_cast<size_t>(r)].output;
    EXPECT_NE(outcomes[static_cast<size_t>(r)].output.find("worker 2 is gone"), std::string::npos);
  }
}

// A worker that closes its connections without a bye: in sync mode every other worker gets an
// error naming it within seconds (the server no longer waits for it); in async mode the others
// finish and the servers exit cleanly.
TEST(PsFaults, WorkerClosingWithoutByeIsNoticed) {
  for (const std::string transport : {"auto", "tcp"}) {
    ProcessJob job(5, "ps_stepping_job",
                   {{"PS_WORKERS", "3"}, {"PS_SERVERS", "2"}, {"PS_RUDE_RANK", "1"}, {"HORA_TRANSPORT", transport},
                    {"HORA_TIMEOUT_SECONDS", "60"}});
    const auto outcomes = job.wait(60s);
    const auto closed_at = outcomes[1].ended;
    EXPECT_NE(outcomes[1].output.find("closed without bye"), std::string::npos) << outcomes[1].output;
    for (int w : {0, 2}) {
      const auto& o = outcomes[static_cast<size_t>(w)];
      EXPECT_EQ(o.exit_code, 10 + static_cast<int>(ErrorKind::kPeer)) << transport << " worker " << w << ":\n"
                                                                        << o.output;
      EXPECT_NE(o.output.find("worker 1 died"), std::string::npos) << o.output;
      EXPECT_NE(o.output.find("without saying goodbye"), std::string::npos) << o.output;
      EXPECT_LT(o.ended - closed_at, 5s) << transport << " worker " << w << " took too long to hear of it";
    }
  }
  ProcessJob job(5, "ps_stepping_job",
                 {{"PS_WORKERS", "3"}, {"PS_SERVERS", "2"}, {"PS_RUDE_RANK", "1"}, {"PS_ASYNC", "1"},
                  {"PS_STALENESS", "2"}, {"PS_STEPS", "20"}, {"HORA_TIMEOUT_SECONDS", "60"}});
  const auto outcomes = job.wait(60s);
  for (int r : {0, 2, 3, 4})
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].exit_code, 0) << "process " << r << ":\n"
                                                             << outcomes[static_cast<size_t>(r)].output;
  EXPECT_NE(outcomes[0].output.find("done"), std::string::npos);
}

}  // namespace
}  // namespace hora::testing
