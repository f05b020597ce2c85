// launcher::resolveHosts: the one answer to "where may the workers run" for the static launcher,
// the mpirun path and the elastic driver.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "expect_error.h"
#include "launcher/host_resolution.h"

namespace hora::testing {
namespace {

using launcher::JobFlags;

std::vector<std::string> described(const std::vector<launcher::HostSlots>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.host + ":" + std::to_string(h.slots));
  return out;
}

const common::Env kSlurm = common::Env::fromMap({{"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});

TEST(HostResolution, ThisHostWithTheRanksWhenNothingIsGiven) {
  JobFlags f;
  f.slots_per_host = 2;  // only for hosts listed without a count
  EXPECT_EQ(described(launcher::resolveHosts(f, common::Env::fromMap({}), 4)),
            (std::vector<std::string>{launcher::localHostname() + ":4"}));
}

TEST(HostResolution, ASlurmAllocationUnlessHostsAreGiven) {
  JobFlags f;
  EXPECT_EQ(described(launcher::resolveHosts(f, kSlurm, 4)), (std::vector<std::string>{"n1:2", "n2:2"}));
  f.hosts = "a:3,b";
  f.slots_per_host = 5;
  EXPECT_EQ(described(launcher::resolveHosts(f, kSlurm, 4)), (std::vector<std::string>{"a:3", "b:5"}));
}

TEST(HostResolution, AHostfileWinsAndAnUnreadableOneIsNamed) {
  const std::string path = ::testing::TempDir() + "/hora_hostfile";
  std::ofstream(path) << "x slots=2\ny\n";
  JobFlags f;
  f.hosts = "a:3";
  f.hostfile = path;
  EXPECT_EQ(described(launcher::resolveHosts(f, kSlurm, 4)), (std::vector<std::string>{"x:2", "y:1"}));
  std::remove(path.c_str());
  expectInvalid([&] { launcher::resolveHosts(f, kSlurm, 4); }, "--hostfile " + path + ": cannot be read");
}

}  // namespace
}  // namespace hora::testing
