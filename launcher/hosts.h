// Hosts and slots: parsing -H and --hostfile, and placing ranks on hosts.
#pragma once

#include <string>
#include <vector>

namespace hora::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool slots_given = false;  // false: "host" alone, whose slots --slots-per-host may set
};

// "a:4,b:4,c" (a host without ":N" has one slot). Throws InvalidArgumentError naming the bad entry.
std::vector<HostSlots> parseHostList(const std::string& spec);
// A hostfile's text: one host per line as "host slots=N", "host:N" or "host"; '#' starts a
// comment. `origin` names the file in errors ("hosts.txt line 3: ...").
std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& origin);

// A Slurm allocation's hosts and task slots: `nodelist` as SLURM_JOB_NODELIST gives it
// ("node[01-03,07],gpu7", "10.0.0.[1-2]") and `tasks` as SLURM_TASKS_PER_NODE ("2(x3),1": two
// tasks on each of three hosts, then one). Throws InvalidArgumentError naming the variable.
std::vector<HostSlots> slurmAllocationHosts(const std::string& nodelist, const std::string& tasks);

struct Placement {
  std::string host;
  int rank = 0, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  int size = 1;  // of the job (the generation, in an elastic job)
};

// Ranks fill the hosts in order (host 0's slots first), as horovodrun and mpirun --map-by slot
// do; local and cross ranks as hora::Identity defines them. Throws InvalidArgumentError when
// np exceeds the slots or a host is listed twice.
std::vector<Placement> placeRanks(const std::vector<HostSlots>& hosts, int np);

}  // namespace hora::launcher
