// ElasticPlanner (launcher/elastic_planner.h): the elastic driver's decisions, event by event,
// with a clock the test moves.
#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/elastic_planner.h"
#include "launcher/host_discovery.h"
#include "hora/errors.h"

namespace hora::testing {
namespace {

using launcher::ElasticLimits;
using launcher::ElasticPlanner;
using launcher::HostSlots;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Decisions = ElasticPlanner::Decisions;

class Planner {
 public:
  explicit Planner(ElasticLimits limits)
      : planner_(limits, [](milliseconds min, milliseconds) { return min; }) {}

  Decisions hosts(std::vector<HostSlots> h) {
    Decisions d;
    planner_.hostsDiscovered(h, now_, d);
    return d;
  }
  Decisions join(const std::string& id) {
    Decisions d;
    planner_.joined(id, id + "#" + std::to_string(++nonce_), now_, d);
    return d;
  }
  Decisions exit(const std::string& id, bool failed) {
    Decisions d;
    planner_.exited(id, failed, id + " exited", now_, d);
    return d;
  }
  Decisions tick(milliseconds pass = milliseconds(0)) {
    now_ += pass;
    Decisions d;
    planner_.tick(now_, d);
    return d;
  }
  ElasticPlanner& get() { return planner_; }
  ElasticPlanner::Time now() const { return now_; }

 private:
  ElasticPlanner planner_;
  ElasticPlanner::Time now_ = ElasticPlanner::Clock::now();
  int nonce_ = 0;
};

std::vector<std::string> ids(const std::vector<ElasticPlanner::Worker>& workers) {
  std::vector<std::string> out;
  for (const auto& w : workers) out.push_back(w.id);
  return out;
}

// The answer given to `id` in d, or "".
std::string answerOf(const Decisions& d, const std::string& id) {
  for (size_t i = 0; i < d.answers.size(); ++i)
    if (d.answers[i].first == id) return d.answer_values[i];
  return "";
}

// The failure reports d leaves for stopped members, as "<generation>/<rank>: <text>".
std::vector<std::string> reportsOf(const Decisions& d) {
  std::vector<std::string> out;
  for (const auto& r : d.reports) out.push_back(std::to_string(r.generation) + "/" + std::to_string(r.rank) + ": " + r.text);
  return out;
}

ElasticLimits limits(int min_np, int max_np = 1 << 20) {
  ElasticLimits l;
  l.min_np = min_np;
  l.max_np = max_np;
  l.join_window = seconds(10);
  l.elastic_timeout = seconds(30);
  return l;
}

TEST(ElasticPlanner, StartsAWorkerPerSlotUpToMaxNpAndFormsGenerationZeroWhenAllJoined) {
  Planner p(limits(1, 3));
  const Decisions d = p.hosts({{"a", 2, true}, {"b", 2, true}});
  EXPECT_EQ(ids(d.start), (std::vector<std::string>{"a:0", "a:1", "b:0"}));
  p.join("b:0");
  p.join("a:1");
  EXPECT_FALSE(p.tick().generation_formed);  // a:0 has not asked yet
  p.join("a:0");
  const Decisions g = p.tick();
  ASSERT_TRUE(g.generation_formed);
  EXPECT_EQ(answerOf(g, "a:0"), "0 0 3");  // host order, then slot order
  EXPECT_EQ(answerOf(g, "a:1"), "0 1 3");
  EXPECT_EQ(answerOf(g, "b:0"), "0 2 3");
}

TEST(ElasticPlanner, AFailedWorkerBlacklistsItsHostStopsItsOtherWorkersAndTheRestReform) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}, {"b", 2, true}});
  for (auto id : {"a:0", "b:0", "b:1"}) p.join(id);
  ASSERT_TRUE(p.tick().generation_formed);
  const Decisions d = p.exit("b:1", true);
  EXPECT_EQ(d.stop, (std::vector<std::string>{"b:0"}));
  EXPECT_EQ(d.notes, (std::vector<std::string>{"host b is blacklisted for good: b:1 exited"}));
  // Its peers read why b:0 (rank 1) is gone instead of waiting for its own report.
  EXPECT_EQ(reportsOf(d), (std::vector<std::string>{
                              "0/1: horarun stopped worker b:0: its host b is blacklisted: b:1 exited"}));
  EXPECT_TRUE(p.get().blacklisted("b", p.now()));
  p.exit("b:0", true);  // stopped: no second blacklisting, no new decision
  p.join("a:0");
  const Decisions g = p.tick();
  ASSERT_TRUE(g.generation_formed);
  EXPECT_EQ(answerOf(g, "a:0"), "1 0 1");
  // The blacklisted host gets no new worker while it stays in the discovered hosts.
  EXPECT_TRUE(p.hosts({{"a", 1, true}, {"b", 2, true}}).start.empty());
}

TEST(ElasticPlanner, PreviousMembersKeepTheirOrderSoRankZeroHoldsTheCommittedState) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}});
  p.join("a:0");
  ASSERT_TRUE(p.tick().generation_formed);
  // A host earlier in discovery order arrives: its worker still comes after the member.
  const Decisions added = p.hosts({{"b", 1, true}, {"a", 1, true}});
  EXPECT_EQ(ids(added.start), (std::vector<std::string>{"b:0"}));
  EXPECT_EQ(p.join("b:0").hosts_updated, "added");  // the members learn it at their next commit
  EXPECT_FALSE(p.tick().generation_formed);        // a:0 is still training
  p.join("a:0");
  const Decisions g = p.tick();
  EXPECT_EQ(answerOf(g, "a:0"), "1 0 2");
  EXPECT_EQ(answerOf(g, "b:0"), "1 1 2");
}

TEST(ElasticPlanner, AMemberThatDoesNotRejoinWithinTheWindowIsStoppedAndBlacklisted) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  p.join("a:0");
  p.join("b:0");
  ASSERT_TRUE(p.tick().generation_formed);
  p.join("a:0");  // b:0 is stopped (SIGSTOP) or cut off: it never asks
  EXPECT_FALSE(p.tick(seconds(9)).generation_formed);
  const Decisions g = p.tick(seconds(2));
  ASSERT_TRUE(g.generation_formed);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"b:0"}));
  EXPECT_TRUE(p.get().blacklisted("b", p.now()));
  EXPECT_EQ(g.notes, (std::vector<std::string>{
                         "host b is blacklisted for good: worker b:0 (rank 1 of generation 0) did not ask to join "
                         "the next generation within the join window 10 s; it is stopped"}));
  EXPECT_EQ(answerOf(g, "a:0"), "1 0 1");
}

TEST(ElasticPlanner, AMemberDeclaredDeadIsLeftBehindWithoutWaitingForTheWindow) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}, {"b", 1, true}, {"c", 1, true}});
  p.join("a:0");
  p.join("b:0");
  p.join("c:0");
  ASSERT_TRUE(p.tick().generation_formed);
  p.join("a:0");
  p.join("c:0");  // b:0 (rank 1) is stopped: a:0 and c:0's heartbeats declared it dead
  EXPECT_FALSE(p.tick().generation_formed);
  Decisions d;
  p.get().declaredDead(1, "no heartbeat for 3.1 s", p.now(), d);
  EXPECT_EQ(d.stop, (std::vector<std::string>{"b:0"}));
  EXPECT_EQ(d.notes, (std::vector<std::string>{
                         "host b is blacklisted for good: worker b:0 (rank 1 of generation 0) was declared dead by "
                         "its peers: no heartbeat for 3.1 s; it is stopped"}));
  EXPECT_EQ(reportsOf(d), (std::vector<std::string>{
                              "0/1: horarun stopped worker b:0: was declared dead by its peers: no heartbeat for 3.1 s"}));
  const Decisions g = p.tick();  // no time passed: no join window
  ASSERT_TRUE(g.generation_formed);
  EXPECT_EQ(answerOf(g, "a:0"), "1 0 2");
  EXPECT_EQ(answerOf(g, "c:0"), "1 1 2");
}

TEST(ElasticPlanner, ARemovedHostsWorkersAreToldRemovedAndTheOthersSkipNothing) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  p.join("a:0");
  p.join("b:0");
  ASSERT_TRUE(p.tick().generation_formed);
  EXPECT_EQ(p.hosts({{"a", 1, true}}).hosts_updated, "removed");
  const Decisions told = p.join("b:0");
  EXPECT_EQ(answerOf(told, "b:0").rfind("removed ", 0), 0u) << answerOf(told, "b:0");
  p.join("a:0");
  const Decisions g = p.tick();
  EXPECT_EQ(answerOf(g, "a:0"), "1 0 1");
  EXPECT_TRUE(p.exit("b:0", false).stop.empty());  // its exit 0 after removal does not end training
  EXPECT_FALSE(p.tick().end_code.has_value());
}

TEST(ElasticPlanner, ADiscoveredHostIsAnnouncedAddedAndItsWorkersRankAfterTheMembers) {
  Planner p(limits(1));
  p.hosts({{"b", 1, true}});
  p.join("b:0");
  ASSERT_TRUE(p.tick().generation_formed);
  // "a" sorts before "b" in the discovery, but b:0 holds the committed state: it stays rank 0.
  EXPECT_EQ(ids(p.hosts({{"a", 1, true}, {"b", 1, true}}).start), (std::vector<std::string>{"a:0"}));
  EXPECT_EQ(p.join("a:0").hosts_updated, "added");
  EXPECT_FALSE(p.tick().generation_formed);  // the member re-joins at its next commit
  p.join("b:0");
  const Decisions g = p.tick();
  ASSERT_TRUE(g.generation_formed);
  EXPECT_EQ(answerOf(g, "b:0"), "1 0 2");
  EXPECT_EQ(answerOf(g, "a:0"), "1 1 2");
  EXPECT_EQ(p.get().rankOf("a:0"), 1);
}

TEST(ElasticPlanner, OnceAWorkerFinishesTheWaitingJoinersAreToldAndTheStartingOnesStopped) {
  Planner p(limits(1));
  p.hosts({{"a", 1, true}});
  p.join("a:0");
  ASSERT_TRUE(p.tick().generation_formed);
  p.hosts({{"a", 1, true}, {"b", 1, true}, {"c", 1, true}});
  p.join("b:0");  // c:0 is still starting
  const Decisions d = p.exit("a:0", false);
  EXPECT_EQ(answerOf(d, "b:0"), "removed training has finished");
  EXPECT_EQ(d.stop, (std::vector<std::string>{"c:0"}));
  EXPECT_FALSE(d.end_code.has_value());  // b:0 and c:0 have not exited yet
  EXPECT_TRUE(p.tick(seconds(60)).start.empty());  // no new workers once training is over
  p.exit("b:0", false);
  const Decisions last = p.exit("c:0", true);  // stopped by us: no blacklisting, no failure
  ASSERT_TRUE(last.end_code.has_value());
  EXPECT_EQ(*last.end_code, 0);
}

TEST(ElasticPlanner, AWorkerThatFinishesEndsTheJobOnceEveryWorkerHasExited) {
  Planner p(limits(1));
  p.hosts({{"a", 2, true}});
  p.join("a:0");
  p.join("a:1");
  ASSERT_TRUE(p.tick().generation_formed);
  EXPECT_FALSE(p.exit("a:0", false).end_code.has_value());
  const Decisions last = p.exit("a:1", false);
  ASSERT_TRUE(last.end_code.has_value());
  EXPECT_EQ(*last.end_code, 0);
}

TEST(ElasticPlanner, FewerThanMinNpForLongerThanTheTimeoutEndsTheJobSayingWhy) {
  Planner p(limits(2));
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  p.join("a:0");
  p.join("b:0");
  ASSERT_TRUE(p.tick().generation_formed);
  p.exit("b:0", true);
  p.join("a:0");
  EXPECT_FALSE(p.tick(seconds(29)).end_code.has_value());  // waits for --elastic-timeout
  const Decisions d = p.tick(seconds(2));
  ASSERT_TRUE(d.end_code.has_value());
  EXPECT_EQ(*d.end_code, 1);
  EXPECT_NE(d.end_reason.find("fewer than --min-np 2"), std::string::npos) << d.end_reason;
  EXPECT_NE(d.end_reason.find("--elastic-timeout 30 s"), std::string::npos) << d.end_reason;
}

TEST(ElasticPlanner, WithFixedHostsAllBlacklistedForGoodTheJobEndsAtOnce) {
  ElasticLimits l = limits(1);
  l.fixed_hosts = true;
  Planner p(l);
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  p.exit("a:0", true);  // e.g. the command cannot be executed
  EXPECT_FALSE(p.tick().end_code.has_value());  // b can still train
  p.exit("b:0", true);
  const Decisions d = p.tick();
  ASSERT_TRUE(d.end_code.has_value());
  EXPECT_EQ(*d.end_code, 1);
  EXPECT_NE(d.end_reason.find("every host is blacklisted for good"), std::string::npos) << d.end_reason;
}

// horovodrun ends at once when every host its discovery script lists has failed for good.
TEST(ElasticPlanner, EveryDiscoveredHostBlacklistedForGoodEndsTheJobAtOnce) {
  ElasticLimits l = limits(1);
  l.fixed_hosts = false;
  Planner p(l);
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  p.exit("a:0", true);
  EXPECT_FALSE(p.tick().end_code.has_value());  // b's worker still runs
  p.exit("b:0", true);
  const Decisions d = p.tick();
  ASSERT_TRUE(d.end_code.has_value());
  EXPECT_EQ(*d.end_code, 1);
  EXPECT_NE(d.end_reason.find("every host the --host-discovery-script lists"), std::string::npos) << d.end_reason;
}

// With a cooldown a host comes back: the job waits (up to --elastic-timeout), saying once for
// which host and how long. A discovery script that lists no host at all may list one later.
TEST(ElasticPlanner, WithACooldownOrNoDiscoveredHostItWaitsForTheTimeoutInstead) {
  for (bool cooldown : {false, true}) {
    ElasticLimits l = limits(1);
    l.fixed_hosts = false;
    if (cooldown) l.cooldown_min = l.cooldown_max = seconds(60);
    Planner p(l);
    p.hosts({{"a", 1, true}});
    p.exit("a:0", true);
    if (!cooldown) p.hosts({});
    const Decisions first = p.tick(seconds(1));
    EXPECT_FALSE(first.end_code.has_value()) << cooldown << first.end_reason;
    if (cooldown) {
      EXPECT_EQ(first.notes, (std::vector<std::string>{
                                 "no host can run a worker now: waiting for host a to come back from its blacklisting "
                                 "in 59 s (the job ends after --elastic-timeout 30 s with fewer than --min-np workers)"}));
    }
    const Decisions early = p.tick(seconds(28));
    EXPECT_FALSE(early.end_code.has_value()) << cooldown << early.end_reason;
    EXPECT_TRUE(early.notes.empty());  // said once
    EXPECT_TRUE(p.tick(seconds(2)).end_code.has_value()) << cooldown;
  }
}

// Each worker starts with the rank variables of its place, as horovodrun's: host by host, slot
// by slot; one started while a generation runs comes after its members.
TEST(ElasticPlanner, WorkersStartWithThePlaceTheyWouldHave) {
  ElasticLimits l = limits(1);
  l.fixed_hosts = false;
  Planner p(l);
  const Decisions d = p.hosts({{"a", 2, true}, {"b", 1, true}});
  ASSERT_EQ(ids(d.start), (std::vector<std::string>{"a:0", "a:1", "b:0"}));
  const auto place = [&](size_t i) {
    const auto& s = d.start[i].started_as;
    return std::vector<int>{s.rank, s.size, s.local_rank, s.local_size, s.cross_rank, s.cross_size};
  };
  EXPECT_EQ(place(0), (std::vector<int>{0, 3, 0, 2, 0, 2}));
  EXPECT_EQ(place(1), (std::vector<int>{1, 3, 1, 2, 0, 1}));
  EXPECT_EQ(place(2), (std::vector<int>{2, 3, 0, 1, 1, 2}));
  for (const char* id : {"a:0", "a:1", "b:0"}) p.join(id);
  ASSERT_TRUE(p.tick().generation_formed);
  // a:1 fails: host a is blacklisted and a:0 stopped; c is discovered and starts after b:0.
  p.exit("a:1", true);
  const Decisions grown = p.hosts({{"a", 2, true}, {"b", 1, true}, {"c", 1, true}});
  ASSERT_EQ(ids(grown.start), (std::vector<std::string>{"c:0"}));
  const auto& c = grown.start[0].started_as;
  EXPECT_EQ((std::vector<int>{c.rank, c.size, c.local_rank, c.local_size, c.cross_rank, c.cross_size}),
            (std::vector<int>{1, 2, 0, 1, 1, 2}));
}

TEST(ElasticPlanner, ACooldownEndsAndTheHostGetsWorkersAgain) {
  ElasticLimits l = limits(1);
  l.cooldown_min = l.cooldown_max = seconds(5);
  Planner p(l);
  p.hosts({{"a", 1, true}, {"b", 1, true}});
  EXPECT_EQ(p.exit("b:0", true).notes, (std::vector<std::string>{"host b is blacklisted for 5 s: b:0 exited"}));
  EXPECT_TRUE(p.get().blacklisted("b", p.now()));
  EXPECT_TRUE(p.tick(seconds(4)).start.empty());
  EXPECT_EQ(ids(p.tick(seconds(2)).start), (std::vector<std::string>{"b:0"}));
}

TEST(ElasticPlanner, MoreResetsThanTheLimitEndTheJob) {
  ElasticLimits l = limits(1);
  l.reset_limit = 1;
  Planner p(l);
  p.hosts({{"a", 1, true}});
  p.join("a:0");
  ASSERT_TRUE(p.tick().generation_formed);  // generation 0: not a reset
  p.join("a:0");
  ASSERT_TRUE(p.tick().generation_formed);  // reset 1
  p.join("a:0");
  const Decisions d = p.tick();
  ASSERT_TRUE(d.end_code.has_value());
  EXPECT_NE(d.end_reason.find("--reset-limit is 1"), std::string::npos) << d.end_reason;
}

TEST(HostDiscovery, ReadsHostAndHostSlotsLinesAndNamesABadLine) {
  const auto hosts = launcher::parseDiscoveredHosts("a:2\n\n# spare\nb\n  c:1  \n", 3);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "a");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].slots, 3);  // no count: --slots-per-host
  EXPECT_EQ(hosts[2].host, "c");
  try {
    launcher::parseDiscoveredHosts("a:2\na:x\n", 1);
    ADD_FAILURE() << "a bad slot count was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(launcher::parseDiscoveredHosts("a\na:2\n", 1), InvalidArgumentError);  // twice
}

TEST(HostDiscovery, RunsTheScriptAndKeepsNothingWhenItFails) {
  EXPECT_EQ(launcher::HostDiscovery("printf 'x:2\\ny\\n'", 1).discover(seconds(10))->size(), 2u);
  EXPECT_FALSE(launcher::HostDiscovery("exit 3", 1).discover(seconds(10)).has_value());
  EXPECT_FALSE(launcher::HostDiscovery("sleep 5", 1).discover(milliseconds(200)).has_value());
}

}  // namespace
}  // namespace hora::testing
