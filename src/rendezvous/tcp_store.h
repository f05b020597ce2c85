// TcpStore: a Store client talking to a TcpStoreServer over one authenticated connection.
//
// Thread-safe: requests are serialized by a mutex (they are rare: start-up and failure
// reports). Every request carries its deadline to the server, which answers a get/wait that
// cannot complete with a timeout; the client gives the server one extra second before it
// declares the store itself unresponsive.
#pragma once

#include <mutex>
#include <string>

#include "common/crypto.h"
#include "common/socket.h"
#include "rendezvous/store.h"
#include "rendezvous/wire.h"

namespace hora::rendezvous {

class TcpStore final : public Store {
 public:
  // Connects (retrying until the deadline: the server may still be starting) and reads the
  // server's challenge.
  TcpStore(const std::string& host, int port, std::string secret, const common::Deadline& deadline);

  void set(const std::string& key, const std::string& value, const common::Deadline& d) override;
  std::string get(const std::string& key, const common::Deadline& d) override;
  std::optional<std::string> tryGet(const std::string& key, const common::Deadline& d) override;
  int64_t add(const std::string& key, int64_t delta, const common::Deadline& d) override;
  void wait(const std::vector<std::string>& keys, const common::Deadline& d) override;

  // The local address of the connection: an address of this host that reaches the store, and
  // so (usually) the other hosts of the job.
  std::string localHost() const;

 private:
  wire::Response call(wire::Request request, const common::Deadline& deadline);

  std::mutex mutex_;
  common::Fd fd_;            // guarded by mutex_
  const std::string what_;   // "rendezvous store at host:port"
  const std::string secret_;
  common::Nonce challenge_{};
  uint64_t seq_ = 0;         // guarded by mutex_
};

}  // namespace hora::rendezvous
