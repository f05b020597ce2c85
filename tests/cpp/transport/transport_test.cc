// TcpTransport and its mesh set-up, driven directly: framing errors, garbage on a data
// connection, wrong secrets at the handshake, and a peer that leaves cleanly.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <thread>

#include "common/crypto.h"
#include "common/socket.h"
#include "harness.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/tcp/tcp_transport.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;
using transport::OpTag;
using transport::Transfer;
using transport::tcp::TcpTransport;

// Builds `size` transports in threads (one mesh), sharing one store.
std::vector<std::unique_ptr<TcpTransport>> makeMesh(int size, rendezvous::TcpStoreServer& server,
                                                    const std::string& prefix = "t/") {
  std::vector<std::unique_ptr<TcpTransport>> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      const auto d = common::Deadline::after(10s);
      rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
      transport::tcp::MeshOptions o{r, size, kTestSecret, "127.0.0.1", prefix};
      out[static_cast<size_t>(r)] = std::make_unique<TcpTransport>(r, transport::tcp::connectMesh(o, store, d), 64);
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(TcpTransport, GarbageOnADataConnectionIsAPeerErrorNamingTheSender) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto mesh = makeMesh(2, server);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(::send(mesh[1]->socketForTesting(0), junk, sizeof(junk), MSG_NOSIGNAL), 0);
  std::vector<float> buf(4);
  std::vector<Transfer> xs{Transfer::recv(1, buf.data(), 16)};
  try {
    mesh[0]->run(xs, OpTag{1, 1, "allreduce"}, common::Deadline::after(5s));
    FAIL() << "garbage was accepted";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a hora frame"), std::string::npos) << e.what();
  }
  // The transport stays broken: the next call rethrows at once.
  EXPECT_THROW(mesh[0]->run(xs, OpTag{2, 1, "allreduce"}, common::Deadline::after(5s)), PeerError);
}

TEST(TcpTransport, LengthAndOrderMismatchesAreCaughtFromTheHeader) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto mesh = makeMesh(2, server);
  std::vector<std::byte> a(100), b(100), b1(100);  // one receive buffer per rank
  std::string err0, err1;
  std::thread t1([&] {
    std::vector<Transfer> xs{Transfer::send(0, a.data(), 40), Transfer::recv(0, b1.data(), 40)};
    try { mesh[1]->run(xs, OpTag{7, 2, "allgather"}, common::Deadline::after(5s)); } catch (const MismatchError& e) { err1 = e.what(); }
  });
  std::vector<Transfer> xs{Transfer::send(1, a.data(), 48), Transfer::recv(1, b.data(), 48)};
  try { mesh[0]->run(xs, OpTag{7, 2, "allgather"}, common::Deadline::after(5s)); } catch (const MismatchError& e) { err0 = e.what(); }
  t1.join();
  EXPECT_NE(err0.find("sends 40 bytes where this rank expects 48"), std::string::npos) << err0;
  EXPECT_NE(err1.find("sends 48 bytes where this rank expects 40"), std::string::npos) << err1;

  auto mesh2 = makeMesh(2, server, "u/");
  std::thread t2([&] {
    std::vector<Transfer> ys{Transfer::send(0, a.data(), 8)};  // reads a only
    try { mesh2[1]->run(ys, OpTag{3, 5, "alltoall"}, common::Deadline::after(5s)); } catch (const Error&) {}
  });
  std::vector<Transfer> ys{Transfer::recv(1, b.data(), 8)};
  try {
    mesh2[0]->run(ys, OpTag{3, 1, "allreduce"}, common::Deadline::after(5s));
    ADD_FAILURE() << "order mismatch not detected";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
  }
  t2.join();
}

TEST(TcpTransport, PeerThatLeftCleanlyIsNotADeadPeer) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto mesh = makeMesh(3, server);
  mesh[0].reset();  // says goodbye and closes
  std::vector<std::byte> a(16), b(16);
  std::thread late_sender([&] {
    std::this_thread::sleep_for(300ms);  // rank 1 waits meanwhile, watching idle rank 0
    std::vector<Transfer> xs{Transfer::send(1, a.data(), 16)};
    mesh[2]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  });
  std::vector<Transfer> xs{Transfer::recv(2, b.data(), 16)};
  EXPECT_NO_THROW(mesh[1]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s)));
  late_sender.join();
  // But needing data from the departed rank is an error that says it shut down.
  std::vector<Transfer> from0{Transfer::recv(0, b.data(), 16)};
  try {
    mesh[1]->run(from0, OpTag{2, 1, "allreduce"}, common::Deadline::after(5s));
    FAIL() << "receiving from a departed rank succeeded";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
  }
}

TEST(TcpTransport, HandshakeDropsGarbageAndWrongSecretsAndWaitsForTheRealPeer) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  std::unique_ptr<TcpTransport> rank0;
  std::thread t0([&] {
    const auto d = common::Deadline::after(20s);
    rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
    transport::tcp::MeshOptions o{0, 2, kTestSecret, "127.0.0.1", "h/"};
    rank0 = std::make_unique<TcpTransport>(0, transport::tcp::connectMesh(o, store, d), 64);
  });
  const auto d = common::Deadline::after(10s);
  rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
  const std::string where = store.get("h/tcp/0", d);
  const int port = std::stoi(where.substr(where.rfind(':') + 1));
  {  // Garbage, then close.
    auto fd = common::connectTcp("127.0.0.1", port, d, "rank 0");
    const char junk[64] = "\x01\x02garbage";
    common::writeFull(fd.get(), junk, sizeof(junk), d, "rank 0");
  }
  {  // A peer with the wrong secret is refused, and learns so.
    transport::tcp::MeshOptions o{1, 2, "wrong-secret", "127.0.0.1", "h/"};
    EXPECT_THROW(transport::tcp::connectMesh(o, store, d), AuthenticationError);
  }
  transport::tcp::MeshOptions o{1, 2, kTestSecret, "127.0.0.1", "h/"};
  TcpTransport rank1(1, transport::tcp::connectMesh(o, store, d), 64);
  t0.join();
  ASSERT_NE(rank0, nullptr);
  int x = 5, y = 0;
  std::thread s([&] {
    std::vector<Transfer> xs{Transfer::send(1, &x, 4)};
    rank0->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  });
  std::vector<Transfer> xs{Transfer::recv(0, &y, 4)};
  rank1.run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  s.join();
  EXPECT_EQ(y, 5);
}

}  // namespace
}  // namespace hora::testing
