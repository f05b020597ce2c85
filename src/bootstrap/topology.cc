#include "bootstrap/topology.h"

namespace hora::bootstrap {

std::map<std::string, std::vector<int>> Topology::ranksByHost() const {
  std::map<std::string, std::vector<int>> by_host;
  for (size_t r = 0; r < hostnames.size(); ++r) by_host[hostnames[r]].push_back(static_cast<int>(r));
  return by_host;
}

bool Topology::evenHosts() const {
  const auto by_host = ranksByHost();
  if (by_host.size() <= 1) return false;
  const size_t per_host = by_host.begin()->second.size();
  if (per_host <= 1) return false;
  for (const auto& [host, ranks] : by_host) {
    if (ranks.size() != per_host) return false;
  }
  return true;
}

bool Topology::placedByHost() const {
  for (const auto& [host, ranks] : ranksByHost()) {
    if (ranks.back() - ranks.front() + 1 != static_cast<int>(ranks.size())) return false;
  }
  return true;
}

}  // namespace hora::bootstrap
