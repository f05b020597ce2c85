// HydraSsh: MPICH's mpirun (Hydra) starts its proxies with `-launcher-exec PROGRAM`, a program
// run instead of ssh and given ssh's arguments, but has no option for ssh's own flags. horarun
// --mpi hands it a two-line script in a private temporary directory that adds the port and
// identity file (-p, -i), and removes it when the job ends (so mpirun runs as horarun's child,
// with SIGINT/SIGTERM/SIGHUP forwarded to it).
#pragma once

#include <string>
#include <vector>

#include "launcher/remote.h"

namespace hora::launcher {

class HydraSsh {
 public:
  // Writes the script. Throws std::runtime_error when the temporary directory cannot be made.
  explicit HydraSsh(const SshOptions& options);
  ~HydraSsh();
  HydraSsh(const HydraSsh&) = delete;
  HydraSsh& operator=(const HydraSsh&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

// Runs argv as a child, forwarding SIGINT/SIGTERM/SIGHUP to it; returns its exit code (128 + a
// signal that ended it, 127 when it cannot be executed).
int runForwardingSignals(const std::vector<std::string>& argv);

}  // namespace hora::launcher
