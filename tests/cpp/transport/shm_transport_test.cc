// ShmTransport driven directly: streams that wrap the rings, gated sends, receives read in
// place, mismatches caught from the message headers, peers that leave cleanly or die, waking an
// idle rank, sleeping without burning the CPU, and /dev/shm left empty.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>

#include "harness.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/shm/shm_transport.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;
using transport::OpTag;
using transport::Transfer;
using transport::shm::ShmTransport;

// Builds `size` shared-memory transports in threads (one job), sharing one store.
std::vector<std::unique_ptr<ShmTransport>> makeShm(int size, rendezvous::TcpStoreServer& server,
                                                   const std::string& prefix, size_t chunk_bytes = 48) {
  std::vector<std::unique_ptr<ShmTransport>> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      const auto d = common::Deadline::after(10s);
      rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
      transport::tcp::MeshOptions mesh{r, size, kTestSecret, "127.0.0.1", prefix};
      transport::shm::ShmOptions o;
      o.chunk_bytes = chunk_bytes;
      o.inbox_bytes = 0;  // the smallest rings (4 KiB here), so that streams wrap them
      o.key_prefix = prefix;
      std::vector<int> everyone(static_cast<size_t>(size));
      std::iota(everyone.begin(), everyone.end(), 0);
      out[static_cast<size_t>(r)] = std::make_unique<ShmTransport>(r, transport::tcp::connectMesh(mesh, store, d),
                                                                   std::move(everyone), o, store, d);
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 31 + static_cast<size_t>(seed) * 7) & 0xff);
  return v;
}

TEST(ShmTransport, RingsShareTheInboxEvenlyWithAFloorOfFourChunks) {
  transport::shm::ShmOptions o;
  o.chunk_bytes = 256 * 1024;
  o.inbox_bytes = 8 * 1024 * 1024;
  EXPECT_EQ(transport::shm::ringBytes(o, 2), 8u * 1024 * 1024);  // one peer: the whole inbox
  EXPECT_EQ(transport::shm::ringBytes(o, 4), 2796192u);  // 8 MiB / 3 = 2796202.67, down to 16-aligned
  EXPECT_EQ(transport::shm::ringBytes(o, 64), 1024u * 1024);  // 8 MiB / 63 < 4 chunks: the floor
  o.inbox_bytes = 0;
  EXPECT_EQ(transport::shm::ringBytes(o, 2), 1024u * 1024);  // the rings before the inbox knob
  o.chunk_bytes = 48;
  EXPECT_EQ(transport::shm::ringBytes(o, 3), 4096u);  // never below 4 KiB
}

TEST(ShmTransport, StreamsWrapTheRingsAndReceivesReadInPlace) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto shm = makeShm(2, server, "wrap/");
  EXPECT_TRUE(horaSegments({::getpid()}).empty()) << "segments must be unlinked once mapped";
  // Messages of odd lengths, many times the 4 KiB ring, both ways at once; rank 1 receives the
  // second message chunk by chunk (in place) and forwards each chunk as it arrives (gated send).
  const std::vector<size_t> lengths = {0, 1, 15, 17, 4096, 10001, 100003};
  for (size_t n : lengths) {
    auto a = pattern(n, 1), b = pattern(n, 2);
    std::vector<std::byte> got0(n), got1(n), forwarded(n);
    std::thread rank1([&] {
      std::vector<std::byte> relay(n);
      std::vector<Transfer> xs{Transfer::send(0, b.data(), n), Transfer::recv(0, got1.data(), n)};
      xs.push_back(Transfer::recvChunks(0, n, [&](size_t offset, const std::byte* chunk, size_t len) {
        EXPECT_LE(len, 48u);
        std::memcpy(relay.data() + offset, chunk, len);
      }));
      xs.push_back(Transfer::send(0, relay.data(), n, &xs[2].done));
      shm[1]->run(xs, OpTag{1, 1, "wrap"}, common::Deadline::after(10s));
    });
    std::vector<Transfer> xs{Transfer::send(1, a.data(), n), Transfer::recv(1, got0.data(), n),
                             Transfer::send(1, a.data(), n), Transfer::recv(1, forwarded.data(), n)};
    shm[0]->run(xs, OpTag{1, 1, "wrap"}, common::Deadline::after(10s));
    rank1.join();
    EXPECT_EQ(got0, b) << n;
    EXPECT_EQ(got1, a) << n;
    EXPECT_EQ(forwarded, a) << n;
  }
}

TEST(ShmTransport, LengthAndOrderMismatchesAreCaughtFromTheHeader) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto shm = makeShm(2, server, "mismatch/");
  std::vector<std::byte> a(100), b(100), b1(100);
  std::string err0, err1;
  std::thread t1([&] {
    std::vector<Transfer> xs{Transfer::send(0, a.data(), 40), Transfer::recv(0, b1.data(), 40)};
    try { shm[1]->run(xs, OpTag{7, 2, "allgather"}, common::Deadline::after(5s)); } catch (const MismatchError& e) { err1 = e.what(); }
  });
  std::vector<Transfer> xs{Transfer::send(1, a.data(), 48), Transfer::recv(1, b.data(), 48)};
  try { shm[0]->run(xs, OpTag{7, 2, "allgather"}, common::Deadline::after(5s)); } catch (const MismatchError& e) { err0 = e.what(); }
  t1.join();
  EXPECT_NE(err0.find("sends 40 bytes where this rank expects 48"), std::string::npos) << err0;
  EXPECT_NE(err1.find("sends 48 bytes where this rank expects 40"), std::string::npos) << err1;

  auto shm2 = makeShm(2, server, "order/");
  std::thread t2([&] {
    std::vector<Transfer> ys{Transfer::send(0, a.data(), 8)};
    try { shm2[1]->run(ys, OpTag{3, 5, "alltoall"}, common::Deadline::after(5s)); } catch (const Error&) {}
  });
  std::vector<Transfer> ys{Transfer::recv(1, b.data(), 8)};
  try {
    shm2[0]->run(ys, OpTag{3, 1, "allreduce"}, common::Deadline::after(5s));
    ADD_FAILURE() << "order mismatch not detected";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("different orders"), std::string::npos) << e.what();
  }
  t2.join();
}

TEST(ShmTransport, PeerThatLeftCleanlyIsNotADeadPeerButCannotBeWaitedFor) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto shm = makeShm(3, server, "left/");
  shm[0].reset();  // says goodbye and unmaps
  std::vector<std::byte> a(16), b(16);
  std::thread late_sender([&] {
    std::this_thread::sleep_for(300ms);  // rank 1 waits meanwhile
    std::vector<Transfer> xs{Transfer::send(1, a.data(), 16)};
    shm[2]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  });
  std::vector<Transfer> xs{Transfer::recv(2, b.data(), 16)};
  EXPECT_NO_THROW(shm[1]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s)));
  late_sender.join();
  std::vector<Transfer> from0{Transfer::recv(0, b.data(), 16)};
  const auto start = std::chrono::steady_clock::now();
  try {
    shm[1]->run(from0, OpTag{2, 1, "allreduce"}, common::Deadline::after(5s));
    FAIL() << "receiving from a departed rank succeeded";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shut down"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "the departed peer was waited on";
}

TEST(ShmTransport, WaitForIncomingWakesOnAPeersMessageOrTheWakeFdAndSleepsWithoutSpinning) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  auto shm = makeShm(2, server, "idle/");
  EXPECT_FALSE(shm[0]->waitForIncoming(50ms, -1));  // nothing comes
  std::vector<std::byte> a(64), b(64);
  std::thread sender([&] {
    std::this_thread::sleep_for(200ms);
    std::vector<Transfer> xs{Transfer::send(0, a.data(), a.size())};
    shm[1]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  });
  rusage before{}, after{};
  ::getrusage(RUSAGE_THREAD, &before);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(shm[0]->waitForIncoming(5s, -1));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  sender.join();  // rank 1's transport is driven by one thread at a time
  // Then a receive that waits for data that comes late sleeps on the futex.
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);
    std::vector<Transfer> xs{Transfer::send(0, a.data(), a.size())};
    shm[1]->run(xs, OpTag{2, 1, "x"}, common::Deadline::after(5s));
  });
  std::vector<Transfer> xs{Transfer::recv(1, b.data(), b.size())};
  shm[0]->run(xs, OpTag{1, 1, "x"}, common::Deadline::after(5s));
  std::vector<Transfer> ys{Transfer::recv(1, b.data(), b.size())};
  shm[0]->run(ys, OpTag{2, 1, "x"}, common::Deadline::after(5s));
  ::getrusage(RUSAGE_THREAD, &after);
  late.join();
  const double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec + after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                     (after.ru_utime.tv_usec - before.ru_utime.tv_usec + after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e6;
  EXPECT_LT(cpu, 0.1) << "waiting about 0.5 s took " << cpu << " s of CPU";
}

}  // namespace
}  // namespace hora::testing
