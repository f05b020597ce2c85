#include "bootstrap/job/launcher_store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "bootstrap/job/launcher_kvs.h"
#include "common/crypto.h"
#include "common/logging.h"
#include "common/socket.h"
#include "hora/errors.h"

namespace hora::bootstrap {
namespace {

constexpr const char* kKey = "hora-store-0";

uint32_t parseIpv4(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1 ? ntohl(a.s_addr) : 0;
}

// This host's IPv4 addresses with their prefix lengths, loopback left out.
std::vector<std::pair<std::string, int>> ownAddresses() {
  std::vector<std::pair<std::string, int>> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask) continue;
    const uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if ((a >> 24) == 127) continue;
    const uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
    out.emplace_back(text, __builtin_popcount(mask));
  }
  ::freeifaddrs(list);
  return out;
}

// The source address of the default route, or "" without one. A UDP connect sends nothing; it
// only asks the kernel which address it would use (192.0.2.1 is a documentation address).
std::string defaultRouteAddress() {
  common::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  ::inet_pton(AF_INET, "192.0.2.1", &to.sin_addr);
  sockaddr_in me{};
  socklen_t len = sizeof(me);
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len) != 0)
    return "";
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof(text));
  return text;
}

// Rank 0's addresses as it publishes them, the first the one its own host's ranks use.
std::vector<std::string> publishedAddresses(const std::string& iface) {
  if (!iface.empty()) return {common::interfaceAddress(iface)};
  std::vector<std::string> out;
  if (std::string route = defaultRouteAddress(); !route.empty() && parseIpv4(route) >> 24 != 127) out.push_back(route);
  for (const auto& [address, prefix] : ownAddresses())
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(address);
  if (out.empty()) out.push_back("127.0.0.1");  // no network: a job of one host
  return out;
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, by);) out.push_back(part);
  return out;
}

// The first of rank 0's addresses this rank can connect to. On rank 0's host, its first address
// (a local one, which is also what these ranks then advertise to the other hosts).
std::string reachableAddress(const std::vector<std::string>& theirs, int port, int rank,
                             const common::Deadline& deadline) {
  const auto mine = ownAddresses();
  for (const auto& [address, prefix] : mine)
    if (std::find(theirs.begin(), theirs.end(), address) != theirs.end()) return theirs.front();
  const auto ordered = orderByNearness(theirs, mine);
  if (ordered.size() == 1) return ordered.front();
  for (const auto& address : ordered) {
    // A short probe each: a wrong address (another host's private bridge) refuses or drops.
    const auto probe = common::Deadline::after(std::min(deadline.remaining(), std::chrono::milliseconds(1000)));
    try {
      common::connectTcp(address, port, probe, "rank 0's rendezvous store");
      return address;
    } catch (const Error&) {
    }
  }
  std::string list;
  for (const auto& a : theirs) list += (list.empty() ? "" : ", ") + a;
  throw PeerError("rank " + std::to_string(rank) + " cannot reach rank 0's rendezvous store on any of its addresses (" +
                  list + ") at port " + std::to_string(port) +
                  "; set HORA_IFACE to the interface the hosts share, or HORA_RENDEZVOUS_ADDR");
}

}  // namespace

std::vector<std::string> orderByNearness(const std::vector<std::string>& theirs,
                                         const std::vector<std::pair<std::string, int>>& mine) {
  std::vector<std::string> near, far;
  for (const auto& t : theirs) {
    const uint32_t a = parseIpv4(t);
    bool shared = false;
    for (const auto& [address, prefix] : mine) {
      const uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
      shared = shared || (a & mask) == (parseIpv4(address) & mask);
    }
    (shared ? near : far).push_back(t);
  }
  near.insert(near.end(), far.begin(), far.end());
  return near;
}

LearnedRendezvous rendezvousThroughLauncher(const RendezvousOptions& job, int rank, const std::string& iface,
                                            std::chrono::milliseconds timeout) {
  std::unique_ptr<rendezvous::TcpStoreServer> server;
  const auto deadline = common::Deadline::after(timeout);
  std::unique_ptr<LauncherKvs> kvs;
  try {
    kvs = openLauncherKvs(job.launcher_kvs, rank, deadline);
  } catch (const std::exception& e) {
    throw InvalidArgumentError("rank " + std::to_string(rank) +
                               " cannot use the MPI launcher's key-value service to find rank 0 (" + e.what() +
                               "); set HORA_RENDEZVOUS_ADDR to rank 0's host and HORA_SECRET to a random string "
                               "for every rank (e.g. mpirun -x HORA_RENDEZVOUS_ADDR=host0 -x HORA_SECRET)");
  }
  if (rank == 0) {
    // A secret the user set (HORA_SECRET) every rank has already; only a fresh one travels.
    const std::string secret = job.secret.empty() ? common::randomSecret() : job.secret;
    // Every address, unless the job is on one host (job.address is then loopback).
    server = std::make_unique<rendezvous::TcpStoreServer>(job.address.empty() ? "0.0.0.0" : job.address, 0, secret);
    std::string addresses;
    for (const auto& a : job.address.empty() ? publishedAddresses(iface) : std::vector<std::string>{job.address})
      addresses += (addresses.empty() ? "" : ",") + a;
    kvs->put(kKey, std::to_string(server->port()) + ":" + (job.secret.empty() ? secret : "") + ":" + addresses,
             deadline);
  }
  try {
    kvs->fence(deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError("rank " + std::to_string(rank) + ": not every rank reached hora's start-up exchange through " +
                       kvs->name() + " within HORA_TIMEOUT_SECONDS (does every rank initialize hora?): " + e.what());
  }
  const std::string value = kvs->get(0, kKey, deadline);
  kvs.reset();  // finalized: hora is done with the launcher's service
  const auto fields = split(value, ':');
  if (fields.size() != 3) throw PeerError("rank 0 published a malformed rendezvous '" + value + "'");
  RendezvousOptions r = job;
  r.launcher_kvs.clear();
  r.serve_store = false;  // served above
  r.port = std::stoi(fields[0]);
  r.secret = fields[1].empty() ? job.secret : fields[1];
  r.address = rank == 0 ? split(fields[2], ',').front() : reachableAddress(split(fields[2], ','), r.port, rank, deadline);
  HORA_LOG(debug, "rendezvous store at {}:{}, learned through {}", r.address, r.port, job.launcher_kvs);
  return {r, std::move(server)};
}

}  // namespace hora::bootstrap
