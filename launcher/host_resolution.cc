#include "launcher/host_resolution.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "hora/errors.h"

namespace hora::launcher {

std::string localHostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

namespace {

std::string readHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgumentError("--hostfile " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<HostSlots> resolveHosts(const JobFlags& f, const common::Env& env, int local_slots) {
  std::vector<HostSlots> hosts;
  if (!f.hostfile.empty()) hosts = parseHostfile(readHostfile(f.hostfile), f.hostfile);
  else if (!f.hosts.empty()) hosts = parseHostList(f.hosts);
  else if (env.isSet("SLURM_JOB_NODELIST") && env.isSet("SLURM_TASKS_PER_NODE"))
    hosts = slurmAllocationHosts(env.getString("SLURM_JOB_NODELIST"), env.getString("SLURM_TASKS_PER_NODE"));
  else
    return {{localHostname(), local_slots, true}};
  for (auto& h : hosts)
    if (!h.slots_given && f.slots_per_host > 0) h.slots = f.slots_per_host;
  return hosts;
}

}  // namespace hora::launcher
