#include "launcher/host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>

#include "hora/errors.h"

namespace hora::launcher {

std::vector<HostSlots> parseDiscoveredHosts(const std::string& text, int default_slots) {
  std::vector<HostSlots> hosts;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = line.substr(0, line.find('#'));
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    std::vector<HostSlots> parsed;
    try {
      parsed = parseHostList(line);
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError("--host-discovery-script output line " + std::to_string(number) + ": " + e.what());
    }
    if (parsed.size() != 1)
      throw InvalidArgumentError("--host-discovery-script output line " + std::to_string(number) + ": '" + line +
                                 "' is not one 'host' or 'host:slots'");
    if (!parsed[0].slots_given) parsed[0].slots = default_slots;
    for (const auto& h : hosts)
      if (h.host == parsed[0].host)
        throw InvalidArgumentError("--host-discovery-script output line " + std::to_string(number) + ": host " +
                                   h.host + " is listed twice");
    hosts.push_back(parsed[0]);
  }
  return hosts;
}

std::optional<std::vector<HostSlots>> HostDiscovery::discover(std::chrono::milliseconds limit) const {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::execl("/bin/sh", "sh", "-c", script_.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  const auto give_up = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;  // the deadline is checked above
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n > 0) text.append(buf, static_cast<size_t>(n));
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
  }
  ::close(out[0]);
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "horarun: --host-discovery-script " << script_
              << (timed_out ? " did not finish within " + std::to_string(limit.count() / 1000) + " s"
                            : " failed (status " + std::to_string(status) + ")")
              << "; keeping the hosts found before\n";
    return std::nullopt;
  }
  try {
    return parseDiscoveredHosts(text, slots_);
  } catch (const InvalidArgumentError& e) {
    std::cerr << "horarun: " << e.what() << "; keeping the hosts found before\n";
    return std::nullopt;
  }
}

}  // namespace hora::launcher
