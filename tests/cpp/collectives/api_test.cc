// The public API's argument checks, mismatches between ranks, knobs and identity parsing.
#include <gtest/gtest.h>

#include <cmath>

#include "bootstrap/job/job.h"
#include "common/config.h"
#include "common/knobs.h"
#include "expect_error.h"
#include "harness.h"
#include "hora/c_api.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

TEST(Api, BadArgumentsAreTypedErrorsNamingTheArgumentAndLeaveTheCommunicatorUsable) {
  runThreads(2, [](Communicator& c) {
    float buf[8] = {};
    const std::vector<size_t> counts{4, 4}, wrong_len{4};
    expectInvalid([&] { c.allreduce(nullptr, buf, 3, DataType::kFloat32); }, "send buffer is null");
    expectInvalid([&] { c.allreduce(buf, nullptr, 3, DataType::kFloat32); }, "recv buffer is null");
    expectInvalid([&] { c.allreduce(buf, buf, 3, static_cast<DataType>(42)); }, "unknown data type 42");
    expectInvalid([&] { c.allreduce(buf, buf, 3, DataType::kFloat32, {static_cast<ReduceOp>(9)}); }, "unknown reduce op 9");
    expectInvalid([&] { c.allreduce(buf, buf, 3, DataType::kFloat32, {ReduceOp::kSum, NAN}); }, "prescale");
    expectInvalid([&] { c.broadcast(buf, 3, DataType::kFloat32, 2); }, "root 2");
    expectInvalid([&] { c.broadcast(buf, 3, DataType::kFloat32, -1); }, "root -1");
    expectInvalid([&] { c.allgather(buf, 3, buf, counts, DataType::kFloat32); }, "send_count 3");
    expectInvalid([&] { c.allgather(buf, 4, buf, wrong_len, DataType::kFloat32); }, "one per rank");
    expectInvalid([&] { c.reducescatter(buf, buf, wrong_len, DataType::kFloat32); }, "recv_counts");
    expectInvalid([&] { c.alltoall(buf, counts, buf, wrong_len, DataType::kFloat32); }, "recv_counts");
    // Still usable: nothing was sent.
    float x = static_cast<float>(c.rank() + 1), y = 0;
    c.allreduce(&x, &y, 1, DataType::kFloat32);
    EXPECT_EQ(y, 3.0f);
  });
}

TEST(Api, CountsThatDisagreeBetweenRanksFailOnEveryRankWithoutHanging) {
  CommunicatorOptions o = testOptions();
  o.timeout = 5s;
  for (size_t big : {size_t{100}, size_t{1} << 16}) {  // recursive doubling and ring
    const auto errors = runThreadsCollectErrors(2, [&](Communicator& c) {
      std::vector<float> v(big + 8, 1.0f);
      c.allreduce(v.data(), v.data(), big + static_cast<size_t>(c.rank()) * 4, DataType::kFloat32);
    }, o);
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(errors[static_cast<size_t>(r)], "") << "rank " << r << " succeeded with count " << big;
      EXPECT_NE(errors[static_cast<size_t>(r)].find("rank " + std::to_string(1 - r)), std::string::npos)
          << errors[static_cast<size_t>(r)];
    }
  }
}

TEST(Api, DifferentCollectivesOnDifferentRanksAreAMismatch) {
  CommunicatorOptions o = testOptions();
  o.timeout = 5s;
  const auto errors = runThreadsCollectErrors(2, [&](Communicator& c) {
    float v[4] = {1, 2, 3, 4};
    if (c.rank() == 0) c.allreduce(v, v, 4, DataType::kFloat32);
    else c.broadcast(v, 4, DataType::kFloat32, 1);
  }, o);
  EXPECT_NE(errors[0], "");
  EXPECT_NE(errors[0].find("different orders"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("is in broadcast #1 while this rank is in allreduce #1"), std::string::npos)
      << errors[0];
}

TEST(Api, SizeOneCommunicatorComputesLocally) {
  auto c = Communicator::create(Identity{}, RendezvousOptions{}, testOptions());
  int32_t x[3] = {7, 8, 9}, y[3] = {};
  c->allreduce(x, y, 3, DataType::kInt32, {ReduceOp::kAverage, 1.0, 2.0});
  EXPECT_EQ(y[0], 14);
  float f[2] = {1, 2};
  c->allreduce(f, f, 2, DataType::kFloat32, {ReduceOp::kSum, 3.0, 1.0});
  EXPECT_EQ(f[1], 6.0f);
  const std::vector<size_t> one{2};
  float g[2];
  c->allgather(f, 2, g, one, DataType::kFloat32);
  EXPECT_EQ(g[0], 3.0f);
  c->barrier();
}

TEST(Api, InterfaceChoice) {
  CommunicatorOptions o = testOptions();
  o.iface = "lo";
  runThreads(2, [](Communicator& c) {
    int x = 1, y = 0;
    c.allreduce(&x, &y, 1, DataType::kInt32);
    EXPECT_EQ(y, 2);
  }, o);
  o.iface = "nosuch0";
  const auto errors = runThreadsCollectErrors(2, [](Communicator&) {}, o);
  for (const auto& e : errors) EXPECT_NE(e.find("HORA_IFACE: network interface 'nosuch0'"), std::string::npos) << e;
}

TEST(Api, ARankThatNeverArrivesIsATimeoutNamingIt) {
  rendezvous::TcpStoreServer store("127.0.0.1", 0, kTestSecret);
  Identity id;
  id.size = 2;
  id.local_size = 2;
  CommunicatorOptions o = testOptions();
  o.timeout = 500ms;
  try {
    Communicator::create(id, {"127.0.0.1", store.port(), kTestSecret, "alone/"}, o);
    FAIL() << "created a communicator without its second rank";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 1 to connect"), std::string::npos) << e.what();
  }
}

// Ranks on other hosts are known by the hostnames they publish; one that never publishes is
// named (in a split set up after a link broke, this wait is the first to notice).
TEST(Api, ARankWhoseHostNeverAppearsIsATimeoutNamingIt) {
  rendezvous::TcpStoreServer store("127.0.0.1", 0, kTestSecret);
  Identity id;
  id.size = 2;
  id.local_size = 1;  // rank 1 is on another host
  CommunicatorOptions o = testOptions();
  o.timeout = 500ms;
  try {
    Communicator::create(id, {"127.0.0.1", store.port(), kTestSecret, "far/"}, o);
    FAIL() << "created a communicator without its second rank";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: timed out waiting for rank 1 to join"), std::string::npos)
        << e.what();
  }
}

TEST(Knobs, TypedParsingNamesTheVariable) {
  auto env = common::Env::fromMap({{"HORA_TIMEOUT_SECONDS", "abc"}, {"HORA_RING_THRESHOLD", "2M"},
                                   {"HOROVOD_LOG_LEVEL", "debug"}});
  EXPECT_EQ(env.getBytes("HORA_RING_THRESHOLD", 0, INT64_MAX), 2 << 20);
  EXPECT_EQ(env.getString("HORA_LOG_LEVEL"), "debug");  // the Horovod alias
  expectInvalid([&] { common::communicatorOptionsFrom(env); }, "HORA_TIMEOUT_SECONDS='abc'");
  expectInvalid([&] { common::communicatorOptionsFrom(common::Env::fromMap({{"HORA_CHUNK_BYTES", "100"}})); },
                "HORA_CHUNK_BYTES");
  expectInvalid([&] { common::communicatorOptionsFrom(common::Env::fromMap({{"HORA_TRANSPORT", "carrier-pigeon"}})); },
                "HORA_TRANSPORT");
  const auto o = common::communicatorOptionsFrom(common::Env::fromMap({{"HORA_TIMEOUT_SECONDS", "2.5"}}));
  EXPECT_EQ(o.timeout, 2500ms);
  EXPECT_EQ(common::parseBytes("4K"), 4096);
  EXPECT_EQ(common::parseBytes("x"), std::nullopt);
  EXPECT_NE(common::knobsMarkdown().find("HORA_TIMEOUT_SECONDS"), std::string::npos);
}

TEST(Identity, FromEnvironment) {
  const auto alone = bootstrap::identityFrom(common::Env::fromMap({}));
  EXPECT_EQ(alone.size, 1);
  EXPECT_EQ(alone.rank, 0);
  const auto id = bootstrap::identityFrom(common::Env::fromMap(
      {{"HORA_RANK", "5"}, {"HORA_SIZE", "8"}, {"HORA_LOCAL_RANK", "1"}, {"HORA_LOCAL_SIZE", "4"},
       {"HORA_CROSS_RANK", "1"}, {"HORA_CROSS_SIZE", "2"}, {"HORA_HOSTNAME", "b"}}));
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.cross_size, 2);
  EXPECT_EQ(id.hostname, "b");
  const auto partial = bootstrap::identityFrom(common::Env::fromMap({{"HORA_RANK", "1"}, {"HORA_SIZE", "3"}}));
  EXPECT_TRUE(partial.derivesTopology());
  expectInvalid([] { bootstrap::identityFrom(common::Env::fromMap({{"HORA_RANK", "8"}, {"HORA_SIZE", "8"}})); }, "HORA_RANK");
  expectInvalid([] { bootstrap::identityFrom(common::Env::fromMap({{"HORA_RANK", "1"}})); }, "HORA_SIZE");
  expectInvalid([] { bootstrap::identityFrom(common::Env::fromMap({{"HORA_RANK", "0"}, {"HORA_SIZE", "2"}, {"HORA_LOCAL_RANK", "1"}, {"HORA_LOCAL_SIZE", "1"}})); }, "HORA_LOCAL_RANK");
  expectInvalid([] { bootstrap::rendezvousFrom(common::Env::fromMap({{"HORA_RANK", "0"}, {"HORA_SIZE", "2"}})); },
                "HORA_RENDEZVOUS_ADDR");
}

TEST(Identity, RankZeroOfARunnerServesTheStoreWhenTold) {
  // hora.spark and hora.ray set HORA_SERVE_STORE=1 on rank 0 only; horarun never sets it.
  const std::map<std::string, std::string> job{{"HORA_RANK", "0"}, {"HORA_SIZE", "2"}, {"HORA_SECRET", "s"},
                                               {"HORA_RENDEZVOUS_ADDR", "10.1.2.3"}, {"HORA_RENDEZVOUS_PORT", "4321"}};
  EXPECT_FALSE(bootstrap::rendezvousFrom(common::Env::fromMap(job)).serve_store);
  auto serving = job;
  serving["HORA_SERVE_STORE"] = "1";
  const RendezvousOptions r = bootstrap::rendezvousFrom(common::Env::fromMap(serving));
  EXPECT_TRUE(r.serve_store);
  EXPECT_EQ(r.address, "10.1.2.3");
  EXPECT_EQ(r.port, 4321);
  serving["HORA_SERVE_STORE"] = "maybe";
  expectInvalid([&] { bootstrap::rendezvousFrom(common::Env::fromMap(serving)); }, "HORA_SERVE_STORE");
}

TEST(Identity, LocalAndCrossRanksAreDerivedFromHostnames) {
  // Uneven hosts: a, b, a, c, a (ranks 0..4).
  const std::vector<std::string> hosts{"a", "b", "a", "c", "a"};
  struct Want { int local_rank, local_size, cross_rank, cross_size; };
  const Want want[] = {{0, 3, 0, 3}, {0, 1, 1, 3}, {1, 3, 0, 1}, {0, 1, 2, 3}, {2, 3, 0, 1}};
  for (int r = 0; r < 5; ++r) {
    Identity id;
    id.rank = r;
    id.size = 5;
    id.local_rank = id.local_size = id.cross_rank = id.cross_size = Identity::kDerive;
    id.deriveTopology(hosts);
    const Want& w = want[r];
    EXPECT_EQ(id.local_rank, w.local_rank) << "rank " << r;
    EXPECT_EQ(id.local_size, w.local_size) << "rank " << r;
    EXPECT_EQ(id.cross_rank, w.cross_rank) << "rank " << r;
    EXPECT_EQ(id.cross_size, w.cross_size) << "rank " << r;
    EXPECT_NO_THROW(id.validate());
  }
}

HORA_WORKER_SCENARIO(print_identity) {
  auto c = Communicator::fromEnvironment();
  const Identity& id = c->identity();
  std::printf("identity %d %d %d %d %d %d\n", id.rank, id.size, id.local_rank, id.local_size,
              id.cross_rank, id.cross_size);
  return 0;
}

TEST(Identity, CommunicatorDerivesTopologyWhenTheLauncherGaveOnlyRankAndSize) {
  // Three processes all on this host, with only HORA_RANK and HORA_SIZE: one host of three.
  ProcessJob job(3, "print_identity");
  const auto outcomes = job.wait(30s);
  for (int r = 0; r < 3; ++r) {
    const auto& o = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_NE(o.output.find("identity " + std::to_string(r) + " 3 " + std::to_string(r) + " 3 0 1"),
              std::string::npos) << o.output;
  }
}

// The transport is chosen per pair: shared memory between the ranks of a host, TCP between
// hosts; HORA_TRANSPORT=tcp forces TCP everywhere. Split communicators name their members by
// their ranks in the parent.
TEST(Api, TransportPerPairOfRanks) {
  const std::vector<std::string> two_hosts = {"a", "b", "b", "a"};
  runThreads(4, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAlltoall, 1 << 20), "pairwise over shared memory + tcp");
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAllreduce, 64 << 20).rfind("hierarchical", 0), 0u);
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAllgather, 4).rfind("hierarchical", 0), 0u);
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kBroadcast, 4).rfind("hierarchical", 0), 0u);  // not placed host by host
    EXPECT_EQ(c.identity().local_size, 2);
  }, testOptions(), two_hosts);
  runThreads(4, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kBroadcast, 1 << 20), "chain over shared memory + tcp");  // placed host by host
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAllgather, 1 << 20).rfind("hierarchical", 0), 0u);
  }, testOptions(), {"a", "a", "b", "b"});
  // Uneven hosts: the flat algorithms; rank 1, alone on its host, needs TCP only.
  runThreads(3, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAllgather, 4), c.rank() == 1 ? "ring over tcp" : "ring over shared memory + tcp");
  }, testOptions(), {"a", "b", "a"});
  runThreads(3, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAllgather, 1 << 20), "ring over shared memory");
  });
  CommunicatorOptions tcp = testOptions();
  tcp.transport = TransportChoice::kTcp;
  runThreads(4, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kAlltoall, 1 << 20), "pairwise over tcp");
  }, tcp, two_hosts);
  // Every rank alone on its host: nothing to share.
  runThreads(3, [](Communicator& c) {
    EXPECT_EQ(c.algorithmFor(hora::CollectiveKind::kBroadcast, 1), "binomial tree over tcp");
  }, testOptions(), {"x", "y", "z"});
}

TEST(Api, ASplitNamesItsMembersByTheirRanksInTheParent) {
  CommunicatorOptions o = testOptions();
  o.timeout = std::chrono::seconds(2);
  const auto errors = runThreadsCollectErrors(4, [](Communicator& c) {
    if (c.rank() == 0) return;
    auto sub = c.split({1, 2, 3}, "named");
    int x = 1;
    // Rank 3 of the parent (rank 2 of the split) skips the allreduce (a count of 0 sends
    // nothing) and leaves: the others must name it "rank 3".
    sub->allreduce(&x, &x, c.rank() == 3 ? 0 : 1, DataType::kInt32);
    if (c.rank() != 3) sub->barrier();
  }, o);
  EXPECT_EQ(errors[0], "");
  for (int r : {1, 2}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank " + std::to_string(r) + ": "), std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 3"), std::string::npos) << errors[static_cast<size_t>(r)];
  }
}

TEST(CApi, StatusesAndMessages) {
  // Without HORA_* variables (the test process has none) the C ABI gives a size-1 communicator.
  hora_comm* comm = nullptr;
  ASSERT_EQ(hora_comm_init(&comm), HORA_OK) << hora_last_error();
  EXPECT_EQ(hora_comm_size(comm), 1);
  double x = 2, y = 0;
  EXPECT_EQ(hora_allreduce(comm, &x, &y, 1, HORA_FLOAT64, HORA_SUM, 1.0, 1.5), HORA_OK);
  EXPECT_EQ(y, 3.0);
  EXPECT_EQ(hora_broadcast(comm, &x, 1, HORA_FLOAT64, 3), HORA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hora_last_error()).find("root 3"), std::string::npos) << hora_last_error();
  EXPECT_EQ(hora_allgather(comm, &x, 1, &y, nullptr, HORA_FLOAT64), HORA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hora_barrier(nullptr), HORA_ERR_INVALID_ARGUMENT);
  // int16 scales like every integer (in double, truncated); bool has no Average.
  int16_t s[2] = {7, -7}, t[2] = {0, 0};
  EXPECT_EQ(hora_allreduce(comm, s, t, 2, HORA_INT16, HORA_SUM, 0.5, 1.0), HORA_OK) << hora_last_error();
  EXPECT_EQ(t[0], 3);
  EXPECT_EQ(t[1], -3);
  uint8_t flags[2] = {1, 0};
  EXPECT_EQ(hora_allreduce(comm, flags, flags, 2, HORA_BOOL, HORA_MAX, 1.0, 1.0), HORA_OK) << hora_last_error();
  EXPECT_EQ(hora_allreduce(comm, flags, flags, 2, HORA_BOOL, HORA_AVERAGE, 1.0, 1.0), HORA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hora_last_error()).find("bool tensors cannot be averaged"), std::string::npos)
      << hora_last_error();
  hora_comm_destroy(comm);
}

}  // namespace
}  // namespace hora::testing
