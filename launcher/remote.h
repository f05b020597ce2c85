// Remote hosts: telling local hosts from remote ones, the address remote hosts reach us at, and
// the ssh command line that starts horarun's host agent on a remote host.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace hora::launcher {

// "localhost", this machine's hostname, or a name that resolves to an address of one of this
// host's interfaces (so that a network namespace recognises its own address).
bool isLocalHost(const std::string& host);

// The address of this host on the route to `host` (what a worker there can connect back to).
// Throws InvalidArgumentError naming the host when it does not resolve or has no route.
std::string addressToward(const std::string& host);

// An address of this machine that other hosts can reach while none is known yet (an elastic job
// whose remote hosts come later): the default route's source, else the first non-loopback IPv4
// interface address, else 127.0.0.1.
std::string routableOwnAddress();

struct SshOptions {
  int port = 0;                    // -p; 0 = ssh's default
  std::string identity_file;       // -i
  std::chrono::seconds connect_timeout{30};
};

// argv that starts horarun's host agent (host_agent.h) on `host` through ssh, in directory
// `cwd`: `horarun` is the path of this horarun, which the remote host must have too (as it has
// the command's). Everything else, the job secret included, goes to the agent's stdin. A missing
// directory or horarun exits 127 with a message naming the host.
std::vector<std::string> sshHostAgentArgv(const std::string& host, const SshOptions& options, const std::string& cwd,
                                          const std::string& horarun);

// The text to quote one argument for a POSIX shell.
std::string shellQuote(const std::string& s);

}  // namespace hora::launcher
