// horarun's plans for its host agents (host_plan.h) and the hosts of a Slurm allocation
// (hosts.h).
#include <gtest/gtest.h>

#include <string>

#include "expect_error.h"
#include "hora/errors.h"
#include "launcher/host_plan.h"
#include "launcher/hosts.h"

namespace hora {
namespace {

TEST(HostPlan, RoundTripsAnyBytes) {
  launcher::HostPlan plan;
  plan.host = "10.0.0.2";
  plan.grace_ms = 1500;
  plan.command = {"python", "-c", "print('a b')\nprint(\"x\")", ""};
  plan.ranks.push_back({4, {{"HORA_SECRET", "s3:cr=t"}, {"MULTI", "line one\nline two"}, {"U", "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"}}});
  plan.ranks.push_back({5, {{"EMPTY", ""}}});
  const auto back = launcher::decodeHostPlan(launcher::encodeHostPlan(plan));
  EXPECT_EQ(back.host, plan.host);
  EXPECT_EQ(back.grace_ms, 1500);
  EXPECT_EQ(back.command, plan.command);
  ASSERT_EQ(back.ranks.size(), 2u);
  EXPECT_EQ(back.ranks[0].rank, 4);
  EXPECT_EQ(back.ranks[0].env, plan.ranks[0].env);
  EXPECT_EQ(back.ranks[1].env, plan.ranks[1].env);
}

TEST(HostPlan, RefusesGarbage) {
  const std::string good = launcher::encodeHostPlan({"h", 1, {"true"}, {{0, {}}}});
  testing::expectInvalid([&] { launcher::decodeHostPlan(good.substr(0, good.size() - 1)); }, "host plan");
  testing::expectInvalid([&] { launcher::decodeHostPlan(good + "x"); }, "trailing");
  testing::expectInvalid([&] { launcher::decodeHostPlan("abc:def"); }, "malformed");
  testing::expectInvalid([&] { launcher::decodeHostPlan("5:2:ab,"); }, "host plan");
}

TEST(SlurmAllocation, HostsAndSlotsAsSlurmWritesThem) {
  const auto hosts = launcher::slurmAllocationHosts("node[01-03,07],gpu7,10.0.0.[1-2]", "2(x3),1,4,3(x2)");
  std::vector<std::string> names;
  std::vector<int> slots;
  for (const auto& h : hosts) {
    names.push_back(h.host);
    slots.push_back(h.slots);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu7", "10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(slots, (std::vector<int>{2, 2, 2, 1, 4, 3, 3}));
  testing::expectInvalid([] { launcher::slurmAllocationHosts("a[1-2]", "1"); }, "gives slots for 1");
  testing::expectInvalid([] { launcher::slurmAllocationHosts("a[1-x]", "1"); }, "not a Slurm host list");
  testing::expectInvalid([] { launcher::slurmAllocationHosts("a[1-2", "1"); }, "unclosed");
}

}  // namespace
}  // namespace hora
