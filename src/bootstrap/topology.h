// Topology: which host each rank of a group runs on, as every rank read it from the store.
//
// Every rank reads the same names, so every decision made from them (which peers share memory,
// whether the hierarchical collectives apply, how the hierarchy is cut) is the same on every
// rank without a further exchange.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hora::bootstrap {

struct Topology {
  // By rank; empty when the group is known to run on one host (then nothing depends on names).
  std::vector<std::string> hostnames;

  // The ascending ranks of each host.
  std::map<std::string, std::vector<int>> ranksByHost() const;
  // Several hosts with the same number of ranks, more than one, on each: the shape the
  // hierarchical collectives need (uneven hosts keep the flat algorithms).
  bool evenHosts() const;
  // Every host's ranks numbered consecutively (placed host by host).
  bool placedByHost() const;
};

}  // namespace hora::bootstrap
