// The rendezvous store: operations, deadlines, authentication, and hostile input.
#include <gtest/gtest.h>

#include <thread>

#include "common/socket.h"
#include "harness.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "rendezvous/wire.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;
using common::Deadline;
using rendezvous::TcpStore;
using rendezvous::TcpStoreServer;

TEST(Store, SetGetAddWaitTryGet) {
  TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  TcpStore a("127.0.0.1", server.port(), kTestSecret, Deadline::after(5s));
  TcpStore b("127.0.0.1", server.port(), kTestSecret, Deadline::after(5s));
  const std::string binary("\0\x01\xff value", 9);
  a.set("k", binary, Deadline::after(5s));
  EXPECT_EQ(b.get("k", Deadline::after(5s)), binary);
  EXPECT_EQ(b.tryGet("missing", Deadline::after(5s)), std::nullopt);
  EXPECT_EQ(a.add("n", 5, Deadline::after(5s)), 5);
  EXPECT_EQ(b.add("n", -2, Deadline::after(5s)), 3);
  // get and wait block until another client sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    a.set("late1", "x", Deadline::after(5s));
    a.set("late2", "y", Deadline::after(5s));
  });
  b.wait({"late1", "late2"}, Deadline::after(5s));
  EXPECT_EQ(b.get("late2", Deadline::after(5s)), "y");
  setter.join();
}

TEST(Store, GetTimesOutNamingTheKey) {
  TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  TcpStore a("127.0.0.1", server.port(), kTestSecret, Deadline::after(5s));
  try {
    a.get("never", Deadline::after(200ms));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  // The connection stays usable after a timeout answered by the server.
  a.set("k", "v", Deadline::after(5s));
  EXPECT_EQ(a.get("k", Deadline::after(5s)), "v");
}

TEST(Store, WrongSecretIsRefusedAndLogged) {
  TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  TcpStore bad("127.0.0.1", server.port(), "not-the-secret", Deadline::after(5s));
  EXPECT_THROW(bad.set("k", "v", Deadline::after(5s)), AuthenticationError);
  EXPECT_EQ(server.refusedCount(), 1);
  TcpStore good("127.0.0.1", server.port(), kTestSecret, Deadline::after(5s));
  EXPECT_EQ(good.tryGet("k", Deadline::after(5s)), std::nullopt);  // nothing was stored
}

TEST(Store, GarbageAndOversizedFramesAreRefusedAndTheServerKeepsServing) {
  TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  TcpStore good("127.0.0.1", server.port(), kTestSecret, Deadline::after(5s));
  auto raw = [&](const std::string& bytes) {
    auto fd = common::connectTcp("127.0.0.1", server.port(), Deadline::after(5s), "store");
    common::writeFull(fd.get(), bytes.data(), bytes.size(), Deadline::after(5s), "store");
    // The server closes the connection after the hello: reading reaches end of stream.
    char buf[256];
    size_t total = 0;
    try {
      for (;;) {
        common::readFull(fd.get(), buf, 1, Deadline::after(5s), "store");
        ++total;
      }
    } catch (const PeerError&) {
    }
    return total;
  };
  raw("GET / HTTP/1.1\r\n\r\n");
  std::string oversized("HRQ1", 4);
  const uint32_t huge = 0x7fffffff;
  oversized.append(reinterpret_cast<const char*>(&huge), 4);
  raw(oversized);
  std::string truncated_body("HRQ1\x05\x00\x00\x00\x01\x02\x03\x04\x05", 13);
  truncated_body.append(32, 'm');  // a tag that does not verify
  raw(truncated_body);
  EXPECT_EQ(server.refusedCount(), 3);
  good.set("still", "serving", Deadline::after(5s));
  EXPECT_EQ(good.get("still", Deadline::after(5s)), "serving");
}

TEST(StoreWire, ReplayedOrReorderedFramesFailAuthentication) {
  const common::Nonce challenge = common::randomNonce();
  rendezvous::wire::Request req{rendezvous::wire::Op::kSet, 0, {"k"}, "v"};
  const auto frame = rendezvous::wire::encodeRequest(req, kTestSecret, challenge, 0);
  auto ok = rendezvous::wire::decodeRequest(frame, kTestSecret, challenge, 0);
  ASSERT_TRUE(std::holds_alternative<rendezvous::wire::Decoded<rendezvous::wire::Request>>(ok));
  // The same frame at sequence 1 (a replay) or under another challenge is refused.
  EXPECT_TRUE(std::holds_alternative<rendezvous::wire::Refused>(rendezvous::wire::decodeRequest(frame, kTestSecret, challenge, 1)));
  EXPECT_TRUE(std::holds_alternative<rendezvous::wire::Refused>(rendezvous::wire::decodeRequest(frame, kTestSecret, common::randomNonce(), 0)));
  // A prefix of a frame needs more bytes; it is not refused.
  EXPECT_TRUE(std::holds_alternative<rendezvous::wire::NeedMore>(rendezvous::wire::decodeRequest(
      std::span(frame).subspan(0, frame.size() - 1), kTestSecret, challenge, 0)));
}

TEST(Store, ClientNamesAnUnreachableStore) {
  // Nothing listens on this port (taken and released).
  int port;
  {
    auto fd = common::listenTcp("127.0.0.1", 0);
    port = common::localAddress(fd.get()).port;
  }
  try {
    TcpStore s("127.0.0.1", port, kTestSecret, Deadline::after(300ms));
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous store"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hora::testing
