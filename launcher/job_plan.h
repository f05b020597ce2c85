// Where the ranks of a static job (horarun's own launcher, or mpirun's with --mpi) run, and
// where they find the rendezvous store.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/flags.h"
#include "launcher/hosts.h"

namespace hora::launcher {

struct JobPlan {
  std::vector<HostSlots> hosts;
  std::vector<Placement> placements;  // by rank
  std::vector<std::string> server_hosts;  // by parameter server (placeServers)
  std::map<std::string, bool> local;  // by host, of ranks and servers: this machine?
  std::string first_remote;           // empty when every host is local
  std::string store_host;             // the address the store listens on
};

// The hosts of resolveHosts (host_resolution.h), the ranks placed on them (placeRanks), the
// parameter servers' hosts (placeServers), and the store's address: loopback for a job of this host, else this host's address on the route to
// the first remote host of a rank or server (or on
// --network-interface). InvalidArgumentError as those say.
JobPlan planJob(const JobFlags& f);

}  // namespace hora::launcher
