// Where horarun places ranks (hosts.h) and how it starts them (worker_start.h): the specs that
// its static launcher and its elastic driver hand to the WorkerSet.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/knobs.h"
#include "expect_error.h"
#include "launcher/host_plan.h"
#include "launcher/hosts.h"
#include "launcher/server_plan.h"
#include "launcher/thread_budget.h"
#include "launcher/worker_start.h"

namespace hora::launcher {
namespace {

TEST(RankPlacement, RanksFillTheHostsInOrderWithLocalAndCrossRanks) {
  // a has 2 slots, b 3: -np 4 puts ranks 0-1 on a, 2-3 on b.
  const auto p = placeRanks({{"a", 2, true}, {"b", 3, true}}, 4);
  ASSERT_EQ(p.size(), 4u);
  const std::vector<std::string> hosts{p[0].host, p[1].host, p[2].host, p[3].host};
  EXPECT_EQ(hosts, (std::vector<std::string>{"a", "a", "b", "b"}));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r].rank, r);
    EXPECT_EQ(p[r].size, 4);
    EXPECT_EQ(p[r].local_rank, r % 2);
    EXPECT_EQ(p[r].local_size, 2);
    EXPECT_EQ(p[r].cross_rank, r / 2);  // local rank 0 and 1 each exist on both hosts
    EXPECT_EQ(p[r].cross_size, 2);
  }
}

TEST(RankPlacement, UnevenHostsAndRefusals) {
  // a:3, b:1 -> a runs 0,1,2 and b runs 3; local rank 0 is on both hosts, 1 and 2 only on a.
  const auto p = placeRanks({{"a", 3, true}, {"b", 1, true}}, 4);
  EXPECT_EQ(p[3].host, "b");
  EXPECT_EQ(p[3].local_size, 1);
  EXPECT_EQ(p[3].cross_rank, 1);
  EXPECT_EQ(p[3].cross_size, 2);
  EXPECT_EQ(p[1].cross_size, 1);
  testing::expectInvalid([] { placeRanks({{"a", 2, true}}, 3); }, "-np 3 asks for more ranks than the 2 slots");
  testing::expectInvalid([] { placeRanks({{"a", 1, true}, {"a", 1, true}}, 2); }, "host 'a' is listed twice");
}

TEST(WorkerStart, RankVariablesUnderHorasAndHorovodsNames) {
  const Env env = rankVariables({"b", 5, 1, 4, 1, 2, 8});
  const std::map<std::string, std::string> want{{"RANK", "5"},       {"SIZE", "8"},       {"LOCAL_RANK", "1"},
                                                {"LOCAL_SIZE", "4"}, {"CROSS_RANK", "1"}, {"CROSS_SIZE", "2"},
                                                {"HOSTNAME", "b"}};
  for (const auto& [name, value] : want) {
    EXPECT_EQ(env.at("HORA_" + name), value) << name;
    EXPECT_EQ(env.at("HOROVOD_" + name), value) << name;
  }
  EXPECT_EQ(env.size(), 2 * want.size());
  const Env store = storeVariables("10.0.0.1", 4321, "s3cret");
  EXPECT_EQ(store.at("HORA_RENDEZVOUS_ADDR"), "10.0.0.1");
  EXPECT_EQ(store.at("HORA_RENDEZVOUS_PORT"), "4321");
  EXPECT_EQ(store.at("HORA_SECRET"), "s3cret");
}

WorkerStart startHere() {
  WorkerStart start;
  start.command = {"python", "train.py"};
  start.grace_ms = 1500;
  start.ssh.port = 2222;
  start.cwd = "/work/job";
  start.horarun = "/opt/bin/horarun";
  start.forwarded = {{"PATH", "/venv/bin"}, {"HORA_FUSION_THRESHOLD", "from the shell"}};
  start.is_local = [](const std::string& host) { return host == "here"; };
  return start;
}

TEST(WorkerStart, LocalWorkersAreForkedOneByOneInTheirOrder) {
  const std::vector<Worker> workers{{0, "here", "", {{"HORA_RANK", "0"}}},
                                    {1, "here", "worker here:1", {{"HORA_RANK", "1"}}}};
  const auto specs = workerSpecs(workers, startHere());
  ASSERT_EQ(specs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(specs[i].rank, i);
    EXPECT_EQ(specs[i].host, "here");
    EXPECT_EQ(specs[i].argv, (std::vector<std::string>{"python", "train.py"}));
    EXPECT_EQ(specs[i].env, workers[i].env);  // a local worker inherits the shell: nothing forwarded
    EXPECT_TRUE(specs[i].agent_ranks.empty());
    EXPECT_TRUE(specs[i].stdin_data.empty());
  }
  EXPECT_EQ(specs[1].name, "worker here:1");
}

TEST(WorkerStart, EachRemoteHostGetsOneHostAgentRunningItsWorkers) {
  // Ranks 0 and 3 here, 1 and 4 on b, 2 on c: two local specs, then b's agent, then c's.
  std::vector<Worker> workers;
  const std::vector<std::pair<int, std::string>> hosts{{0, "here"}, {1, "b"}, {2, "c"}, {3, "here"}, {4, "b"}};
  for (const auto& [rank, host] : hosts)
    workers.push_back({rank, host, "", {{"HORA_RANK", std::to_string(rank)}, {"HORA_FUSION_THRESHOLD", "1M"}}});
  const auto specs = workerSpecs(workers, startHere());
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].rank, 0);
  EXPECT_EQ(specs[1].rank, 3);
  EXPECT_EQ(specs[2].host, "b");
  EXPECT_EQ(specs[2].rank, 1);
  EXPECT_EQ(specs[2].agent_ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(specs[3].host, "c");
  EXPECT_EQ(specs[3].agent_ranks, (std::vector<int>{2}));
  // ssh to the host, starting this horarun as the agent; nothing secret on the command line.
  const auto& argv = specs[2].argv;
  EXPECT_EQ(argv.front(), "ssh");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "b"), argv.end());
  std::string joined;
  for (const auto& a : argv) joined += a + " ";
  EXPECT_NE(joined.find("/opt/bin/horarun"), std::string::npos) << joined;
  EXPECT_NE(joined.find("2222"), std::string::npos) << joined;
  // The plan on the agent's stdin: the command, the grace period, each worker's variables over
  // the forwarded shell environment.
  const HostPlan plan = decodeHostPlan(specs[2].stdin_data);
  EXPECT_EQ(plan.host, "b");
  EXPECT_EQ(plan.grace_ms, 1500);
  EXPECT_EQ(plan.command, (std::vector<std::string>{"python", "train.py"}));
  ASSERT_EQ(plan.ranks.size(), 2u);
  EXPECT_EQ(plan.ranks[1].rank, 4);
  EXPECT_EQ(plan.ranks[1].env.at("HORA_RANK"), "4");
  EXPECT_EQ(plan.ranks[1].env.at("PATH"), "/venv/bin");
  EXPECT_EQ(plan.ranks[1].env.at("HORA_FUSION_THRESHOLD"), "1M");  // the worker's own wins
}

// --servers K alone: the ranks' hosts in turn; --server-hosts: the listed hosts in turn while
// each has room.
TEST(ServerPlacement, OnTheRanksHostsInTurnOrOnTheListedHosts) {
  const auto ranks = placeRanks({{"a", 2, true}, {"b", 2, true}}, 4);
  using Hosts = std::vector<std::string>;
  EXPECT_EQ(placeServers("", 0, ranks), Hosts{});
  EXPECT_EQ(placeServers("", 2, ranks), (Hosts{"a", "b"}));
  EXPECT_EQ(placeServers("", 3, ranks), (Hosts{"a", "b", "a"}));
  EXPECT_EQ(placeServers("", 2, placeRanks({{"a", 4, true}}, 2)), (Hosts{"a", "a"}));  // b had no rank
  EXPECT_EQ(placeServers("c:1,d:1", 0, ranks), (Hosts{"c", "d"}));
  EXPECT_EQ(placeServers("c:3,d:1", 0, ranks), (Hosts{"c", "d", "c", "c"}));
  EXPECT_EQ(placeServers("c:3,d:1", 2, ranks), (Hosts{"c", "d"}));
  EXPECT_EQ(placeServers("b:1,c", 2, ranks), (Hosts{"b", "c"}));  // a rank's host may serve too
  testing::expectInvalid([&] { placeServers("c:1,d:1", 3, ranks); }, "--servers 3 is more than the 2");
  testing::expectInvalid([&] { placeServers("c:1,c:2", 0, ranks); }, "lists host c twice");
}

// Servers are workers with horarun's own command: forked here, and on a remote host started by
// a host agent of their own beside the ranks' agent there.
TEST(ServerPlacement, ServersRunHorarunAndGetTheirOwnAgentOnARemoteHost) {
  WorkerStart start = startHere();
  const auto ranks = placeRanks({{"here", 1, true}, {"b", 1, true}}, 2);
  const Env store = storeVariables("10.0.0.1", 4321, "s3cret");
  const auto servers = serverWorkers(2, {"localhost", "b", "c"}, {{"HORA_RANK", "9"}, {"X", "y"}}, ranks,
                                     [](const std::string& h) { return h == "here" || h == "localhost"; },
                                     start.horarun, store);
  ASSERT_EQ(servers.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const auto& s = servers[static_cast<size_t>(k)];
    EXPECT_EQ(s.number, 2 + k);
    EXPECT_EQ(s.name, "parameter server " + std::to_string(k));
    EXPECT_EQ(s.command, (std::vector<std::string>{"/opt/bin/horarun", kPsServerFlag}));
    EXPECT_EQ(s.env.at("HORA_PS_SERVER_INDEX"), std::to_string(k));
    EXPECT_EQ(s.env.at("HORA_SIZE"), "2");
    EXPECT_EQ(s.env.at("HORA_PS_SERVERS"), "3");
    EXPECT_EQ(s.env.at("HORA_SECRET"), "s3cret");
    EXPECT_EQ(s.env.at("X"), "y");
    EXPECT_EQ(s.env.count("HORA_RANK"), 0u);
  }
  EXPECT_EQ(servers[0].env.at("HORA_HOSTNAME"), "here");  // this machine's ranks' name: shared memory
  EXPECT_EQ(servers[1].env.at("HORA_HOSTNAME"), "b");
  std::vector<Worker> all{{0, "here", "", {}}, {1, "b", "", {}}};
  all.insert(all.end(), servers.begin(), servers.end());
  start.is_local = [](const std::string& h) { return h == "here" || h == "localhost"; };
  const auto specs = workerSpecs(all, start);
  ASSERT_EQ(specs.size(), 5u);  // rank 0 and server 0 forked; agents: b's ranks, b's server, c's server
  EXPECT_EQ(specs[1].argv, (std::vector<std::string>{"/opt/bin/horarun", kPsServerFlag}));
  EXPECT_EQ(specs[2].agent_ranks, (std::vector<int>{1}));
  EXPECT_EQ(decodeHostPlan(specs[2].stdin_data).command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_EQ(specs[3].host, "b");
  EXPECT_EQ(specs[3].agent_ranks, (std::vector<int>{3}));
  EXPECT_EQ(decodeHostPlan(specs[3].stdin_data).command,
            (std::vector<std::string>{"/opt/bin/horarun", kPsServerFlag}));
  EXPECT_EQ(specs[4].host, "c");
  EXPECT_EQ(specs[4].agent_ranks, (std::vector<int>{4}));
}

// An elastic job's generation gets servers of its own: they serve its ranks (HORA_SIZE) under its
// store prefix (HORA_PS_GENERATION), on the generation's ranks' hosts unless --server-hosts
// pins them, and as many in every generation.
TEST(ServerPlacement, AnElasticGenerationsServersFollowItsRanks) {
  const std::vector<Placement> generation{{"b", 0}, {"a", 1}, {"b", 2}};  // host a lost a rank
  EXPECT_EQ(placeServers("", 2, generation), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(placeServers("c:1", 0, generation), (std::vector<std::string>{"c"}));
  EXPECT_EQ(serverCount("", 3), 3);
  EXPECT_EQ(serverCount("c:2,d:1", 0), 3);
  EXPECT_EQ(serverCount("c:2,d:1", 2), 2);
  const auto servers = serverWorkers(3, {"b", "a"}, {}, generation, [](const std::string&) { return true; },
                                     "/opt/bin/horarun", storeVariables("10.0.0.1", 4321, "s3cret"), 4);
  ASSERT_EQ(servers.size(), 2u);
  for (const auto& s : servers) {
    EXPECT_EQ(s.env.at("HORA_SIZE"), "3");
    EXPECT_EQ(s.env.at("HORA_PS_GENERATION"), "4");
  }
  // A static job's servers have no generation.
  const auto static_servers = serverWorkers(3, {"b"}, {}, generation, [](const std::string&) { return true; },
                                            "/opt/bin/horarun", storeVariables("10.0.0.1", 4321, "s3cret"));
  EXPECT_EQ(static_servers[0].env.count("HORA_PS_GENERATION"), 0u);
}

// A worker's failure is let go only in an asynchronous job, only for workers, and never for the
// last one standing; the store is asked at the first failure and until it says yes.
TEST(AsyncWorkerTolerance, LetsWorkersOfAnAsyncJobGoButNotTheLastOrAServer) {
  int asked = 0;
  AsyncWorkerTolerance sync({0, 1, 2}, [&] { return ++asked, false; });
  EXPECT_EQ(sync({3}), "");  // parameter server 0 (numbered after the ranks)
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(sync({2}), "");  // not an async job (or not yet registered): the failure stops it
  EXPECT_EQ(asked, 1);

  asked = 0;
  AsyncWorkerTolerance async({0, 1, 2}, [&] { return ++asked, true; });
  EXPECT_NE(async({2}).find("its other 2 worker(s) go on without it"), std::string::npos);
  EXPECT_NE(async({0}).find("its other 1 worker(s) go on without it"), std::string::npos);
  EXPECT_EQ(asked, 1);        // known async: not asked again
  EXPECT_EQ(async({1}), "");  // the last worker: nobody left to go on
}

TEST(AsyncWorkerTolerance, AHostAgentsRanksGoTogether) {
  AsyncWorkerTolerance tolerate({0, 1, 2, 3, 4, 5}, [] { return true; });
  EXPECT_NE(tolerate({2, 3}).find("its other 4 worker(s) go on without them"), std::string::npos);
  EXPECT_NE(tolerate({5}).find("its other 3 worker(s)"), std::string::npos);
  AsyncWorkerTolerance none({}, [] { return true; });  // a job without servers, or a server's agent
  EXPECT_EQ(none({0}), "");
}

// Note [thread budget]: the cores of a host divided among the ranks started there, unless the
// user chose (the worker's variables or the environment beneath them) or a rank is alone.
TEST(ThreadBudget, TheHostsCoresAreDividedAmongItsRanks) {
  const Env rank_of_two{{"HORA_LOCAL_SIZE", "2"}};
  EXPECT_EQ(threadBudget(rank_of_two, false, 2, 2), "1");
  EXPECT_EQ(threadBudget(rank_of_two, false, 8, 2), "4");
  EXPECT_EQ(threadBudget(rank_of_two, false, 7, 2), "3");
  EXPECT_EQ(threadBudget({{"HORA_LOCAL_SIZE", "4"}}, false, 2, 4), "1");  // never 0
  // Two -H names of one machine: 3 ranks started there, though each name has fewer.
  EXPECT_EQ(threadBudget({{"HORA_LOCAL_SIZE", "1"}}, false, 6, 3), "2");
  EXPECT_EQ(threadBudget({{"HORA_LOCAL_SIZE", "1"}}, false, 2, 1), std::nullopt);  // alone
  EXPECT_EQ(threadBudget({{"HORA_LOCAL_SIZE", "2"}, {"OMP_NUM_THREADS", "2"}}, false, 2, 2), std::nullopt);
  EXPECT_EQ(threadBudget(rank_of_two, true, 2, 2), std::nullopt);  // inherited from the shell
  EXPECT_EQ(threadBudget({{"HORA_RANK", "0"}}, false, 2, 2), std::nullopt);  // not a rank's variables
}

TEST(ThreadBudget, OnlyRanksAreCountedAndGiven) {
  Env a{{"HORA_LOCAL_SIZE", "2"}}, b{{"HORA_LOCAL_SIZE", "2"}}, server{{"HORA_PS_SERVER", "0"}};
  if (common::processVariable("OMP_NUM_THREADS")) GTEST_SKIP() << "OMP_NUM_THREADS is set: the budget stands aside";
  EXPECT_EQ(addThreadBudget({&a, &b, &server}, false), 2);
  EXPECT_EQ(a.at("OMP_NUM_THREADS"), std::to_string(std::max(1, usableCores() / 2)));
  EXPECT_EQ(b.at("OMP_NUM_THREADS"), a.at("OMP_NUM_THREADS"));
  EXPECT_EQ(server.count("OMP_NUM_THREADS"), 0u);
}

}  // namespace
}  // namespace hora::launcher
