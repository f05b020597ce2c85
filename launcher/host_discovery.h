// HostDiscovery: runs horovodrun's --host-discovery-script and reads the usable hosts from it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hosts.h"

namespace hora::launcher {

// The script's output: one host per line, "host" or "host:slots"; blank lines and '#' comments
// are skipped. A host without a count gets `default_slots`. Throws InvalidArgumentError naming
// the line it cannot read.
std::vector<HostSlots> parseDiscoveredHosts(const std::string& text, int default_slots);

class HostDiscovery {
 public:
  HostDiscovery(std::string script, int default_slots) : script_(std::move(script)), slots_(default_slots) {}
  // Runs the script (killed after `limit`). nullopt, with the reason on stderr, when it failed:
  // the driver keeps the hosts it knew, as horovodrun does.
  std::optional<std::vector<HostSlots>> discover(std::chrono::milliseconds limit) const;

 private:
  std::string script_;
  int slots_;
};

}  // namespace hora::launcher
