#include "launcher/remote.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "hora/errors.h"

namespace hora::launcher {
namespace {

std::vector<std::string> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return {};
  std::vector<std::string> out;
  for (addrinfo* a = found; a; a = a->ai_next) {
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof(text));
    out.push_back(text);
  }
  ::freeaddrinfo(found);
  return out;
}

std::set<std::string> interfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    out.insert(text);
  }
  ::freeifaddrs(list);
  return out;
}

// Runs on the remote host under `sh -c`: $1 is the working directory, $2 this host's name as
// horarun knows it, $3 the path of horarun.
constexpr const char* kAgentWrapper = R"SH(
cd "$1" 2>/dev/null || { echo "horarun: cannot enter directory $1 on host $2" >&2; exit 127; }
[ -x "$3" ] || { echo "horarun: $3 is not on host $2 (every host needs hora installed at the same path)" >&2; exit 127; }
exec "$3" --host-agent
)SH";

std::vector<std::string> sshBase(const std::string& host, const SshOptions& options) {
  std::vector<std::string> argv = {"ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                                    "-o", "LogLevel=ERROR", "-o",
                                    "ConnectTimeout=" + std::to_string(options.connect_timeout.count())};
  if (options.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(options.port));
  }
  if (!options.identity_file.empty()) {
    argv.push_back("-i");
    argv.push_back(options.identity_file);
  }
  argv.push_back(host);
  return argv;
}

}  // namespace

std::vector<std::string> sshHostAgentArgv(const std::string& host, const SshOptions& options, const std::string& cwd,
                                          const std::string& horarun) {
  std::vector<std::string> argv = sshBase(host, options);
  // ssh joins its arguments with spaces into one remote shell command line: quote every word.
  std::string remote = "sh -c ";
  remote.append(shellQuote(kAgentWrapper)).append(" hora-agent ").append(shellQuote(cwd));
  remote.append(" ").append(shellQuote(host)).append(" ").append(shellQuote(horarun));
  argv.push_back(remote);
  return argv;
}

bool isLocalHost(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  if (host == name) return true;
  const auto mine = interfaceAddresses();
  for (const auto& a : resolve(host))
    if (mine.count(a) || a.rfind("127.", 0) == 0) return true;
  return false;
}

std::string addressToward(const std::string& host) {
  const auto addresses = resolve(host);
  if (addresses.empty()) throw InvalidArgumentError("host '" + host + "' does not resolve to an IPv4 address");
  // A UDP connect sends nothing; it only asks the kernel which source address it would use.
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  ::inet_pton(AF_INET, addresses[0].c_str(), &to.sin_addr);
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  const std::string why = ok ? "" : std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!ok) throw InvalidArgumentError("host '" + host + "' (" + addresses[0] + ") is unreachable: " + why);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof(text));
  return text;
}

std::string routableOwnAddress() {
  try {
    return addressToward("192.0.2.1");  // a documentation address: only the route is looked up
  } catch (const InvalidArgumentError&) {
    // No default route (an isolated network): any non-loopback address will do.
  }
  for (const std::string& a : interfaceAddresses())
    if (a.rfind("127.", 0) != 0) return a;
  return "127.0.0.1";
}

std::string shellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace hora::launcher
