// TcpStoreServer: serves the Store protocol (Note [store protocol] in wire.h) to the ranks of a
// job. The launcher runs one; tests run one in-process.
//
// One background thread ("hora-store") runs a poll loop over the listening socket and every
// client; blocked get/wait requests are parked until their key appears or their deadline
// passes. Nothing a client sends can crash the loop: a refused frame is logged and closes only
// that client's connection. Destruction stops and joins the thread.
#pragma once

#include <memory>
#include <string>

namespace hora::rendezvous {

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks a free one).
  TcpStoreServer(const std::string& host, int port, std::string secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  // Number of frames refused so far (for tests and the launcher's log).
  int refusedCount() const;

 private:
  class Loop;
  std::unique_ptr<Loop> loop_;
};

}  // namespace hora::rendezvous
