// The bootstrap of mpirun-started jobs through the launcher's key-value service: the PMI-1 wire
// client against a scripted process manager on a socket pair, the ordering of rank 0's
// addresses, and when the service is chosen.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "bootstrap/job/pmi_wire_kvs.h"
#include "bootstrap/job/launcher_store.h"
#include "bootstrap/job/mpi_launch.h"
#include "common/knobs.h"
#include "expect_error.h"
#include "hora/errors.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

// A process manager that answers each command line with reply(line); "" = no answer (hang),
// "close" = closes the socket. Records what it was sent.
class FakePmiServer {
 public:
  explicit FakePmiServer(std::function<std::string(const std::string&)> reply) : reply_(std::move(reply)) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    client_ = fds[0];
    server_ = fds[1];
    thread_ = std::thread([this] { serve(); });
  }
  ~FakePmiServer() {
    ::shutdown(server_, SHUT_RDWR);
    thread_.join();
    ::close(server_);
    ::close(client_);
  }
  int clientFd() const { return client_; }
  std::vector<std::string> received;

 private:
  void serve() {
    std::string buffered;
    char buf[512];
    for (;;) {
      const ssize_t n = ::read(server_, buf, sizeof(buf));
      if (n <= 0) return;
      buffered.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buffered.find('\n')) != std::string::npos) {
        const std::string line = buffered.substr(0, nl);
        buffered.erase(0, nl + 1);
        received.push_back(line);
        const std::string answer = reply_(line);
        if (answer == "close") {
          ::shutdown(server_, SHUT_RDWR);
          return;
        }
        if (!answer.empty()) {
          EXPECT_EQ(::write(server_, answer.data(), answer.size()), static_cast<ssize_t>(answer.size()));
        }
      }
    }
  }
  std::function<std::string(const std::string&)> reply_;
  int client_ = -1, server_ = -1;
  std::thread thread_;
};

// Hydra's answers, with a key-value space of its own.
std::string hydra(const std::string& line, std::map<std::string, std::string>& kvs) {
  const auto w = bootstrap::PmiWireKvs::parse(line);
  const std::string cmd = w.at("cmd");
  if (cmd == "init") return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n";
  if (cmd == "get_maxes") return "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n";
  if (cmd == "get_my_kvsname") return "cmd=my_kvsname rc=0 kvsname=kvs_42_0\n";
  if (cmd == "put") {
    kvs[w.at("key")] = w.at("value");
    return "cmd=put_result rc=0 msg=success\n";
  }
  if (cmd == "barrier_in") return "cmd=barrier_out\n";
  if (cmd == "get") {
    if (!kvs.count(w.at("key"))) return "cmd=get_result rc=-1 msg=key_" + w.at("key") + "_not_found\n";
    return "cmd=get_result rc=0 msg=success value=" + kvs[w.at("key")] + "\n";
  }
  if (cmd == "finalize") return "cmd=finalize_ack\n";
  return "cmd=unknown rc=-1\n";
}

TEST(PmiWire, SpeaksPmiOneToHydra) {
  std::map<std::string, std::string> kvs;
  FakePmiServer server([&](const std::string& l) { return hydra(l, kvs); });
  const auto deadline = common::Deadline::after(5s);
  {
    bootstrap::PmiWireKvs pmi(server.clientFd(), deadline);
    pmi.put("hora-store-0", "4242:00ff:10.0.0.1,192.168.1.5", deadline);
    pmi.fence(deadline);
    EXPECT_EQ(pmi.get(0, "hora-store-0", deadline), "4242:00ff:10.0.0.1,192.168.1.5");
    try {
      pmi.get(0, "missing", deadline);
      ADD_FAILURE() << "a missing key was found";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("rc=-1"), std::string::npos) << e.what();
    }
    testing::expectInvalid([&] { pmi.put("a key", "v", deadline); }, "space");
  }
  ASSERT_GE(server.received.size(), 7u);
  EXPECT_EQ(server.received[0], "cmd=init pmi_version=1 pmi_subversion=1");
  EXPECT_EQ(server.received[3], "cmd=put kvsname=kvs_42_0 key=hora-store-0 value=4242:00ff:10.0.0.1,192.168.1.5");
  EXPECT_EQ(server.received[4], "cmd=barrier_in");
  EXPECT_EQ(server.received.back(), "cmd=finalize");
}

TEST(PmiWire, SilentProcessManagerTimesOut) {
  std::map<std::string, std::string> kvs;
  FakePmiServer server([&](const std::string& l) { return l == "cmd=barrier_in" ? "" : hydra(l, kvs); });
  bootstrap::PmiWireKvs pmi(server.clientFd(), common::Deadline::after(5s));
  const auto start = std::chrono::steady_clock::now();
  try {
    pmi.fence(common::Deadline::after(300ms));
    ADD_FAILURE() << "the fence returned without a barrier_out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("PMI_FD"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(PmiWire, ClosedOrConfusedProcessManagerIsNamed) {
  {
    FakePmiServer server([](const std::string&) { return std::string("close"); });
    try {
      bootstrap::PmiWireKvs pmi(server.clientFd(), common::Deadline::after(5s));
      ADD_FAILURE() << "init succeeded on a closed socket";
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
    }
  }
  FakePmiServer server([](const std::string&) { return std::string("cmd=something_else rc=0\n"); });
  try {
    bootstrap::PmiWireKvs pmi(server.clientFd(), common::Deadline::after(5s));
    ADD_FAILURE() << "init accepted a wrong answer";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("expected response_to_init"), std::string::npos) << e.what();
  }
}

TEST(PmiWire, BadDescriptorSaysWhatToSet) {
  testing::expectInvalid([] { bootstrap::PmiWireKvs pmi(987654, common::Deadline::after(1s)); }, "PMI_FD=987654");
}

TEST(StoreThroughLauncher, NearAddressesFirst) {
  const std::vector<std::string> theirs = {"172.17.0.1", "10.199.3.1", "192.168.7.2"};
  EXPECT_EQ(bootstrap::orderByNearness(theirs, {{"10.199.3.2", 24}}),
            (std::vector<std::string>{"10.199.3.1", "172.17.0.1", "192.168.7.2"}));
  EXPECT_EQ(bootstrap::orderByNearness(theirs, {{"192.168.0.9", 16}, {"172.17.0.1", 16}}),
            (std::vector<std::string>{"172.17.0.1", "192.168.7.2", "10.199.3.1"}));
  EXPECT_EQ(bootstrap::orderByNearness(theirs, {}), theirs);
}

common::Env envOf(std::map<std::string, std::string> m) { return common::Env::fromMap(m); }

TEST(ForeignLaunch, MpirunAcrossHostsUsesTheLaunchersService) {
  const auto hydra_env = envOf({{"PMI_SIZE", "8"}, {"PMI_RANK", "5"}, {"MPI_LOCALNRANKS", "4"}, {"PMI_FD", "7"}});
  auto job = bootstrap::detectMpiLaunch(hydra_env);
  ASSERT_TRUE(job);
  auto r = bootstrap::foreignRendezvous(hydra_env, *job);
  EXPECT_EQ(r.launcher_kvs, "pmi-fd:7");
  EXPECT_EQ(r.address, "");
  EXPECT_FALSE(r.serve_store);

  const auto ompi = envOf({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "0"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"PMIX_NAMESPACE", "1234"}});
  job = bootstrap::detectMpiLaunch(ompi);
  r = bootstrap::foreignRendezvous(ompi, *job);
  EXPECT_EQ(r.launcher_kvs, "pmix");
  EXPECT_EQ(r.address, "127.0.0.1");  // one host: the store listens on loopback only
  EXPECT_TRUE(r.serve_store);

  // Set by hand, the address wins over the service.
  const auto by_hand = envOf({{"PMI_SIZE", "8"}, {"PMI_RANK", "1"}, {"PMI_FD", "7"},
                              {"HORA_RENDEZVOUS_ADDR", "h1"}, {"HORA_RENDEZVOUS_PORT", "29500"}});
  job = bootstrap::detectMpiLaunch(by_hand);
  r = bootstrap::foreignRendezvous(by_hand, *job);
  EXPECT_EQ(r.launcher_kvs, "");
  EXPECT_EQ(r.address, "h1");
}

TEST(ForeignLaunch, NoServiceAcrossHostsSaysWhatToSet) {
  const auto hydra_env = envOf({{"PMI_SIZE", "8"}, {"PMI_RANK", "5"}, {"MPI_LOCALNRANKS", "4"}});
  const auto job = bootstrap::detectMpiLaunch(hydra_env);
  testing::expectInvalid([&] { bootstrap::foreignRendezvous(hydra_env, *job); },
                        "MPICH offers no key-value service to learn rank 0's address from (PMI_FD is not set): "
                        "set it to the address of rank 0's host");
}

}  // namespace
}  // namespace hora
