// The PMI-1 wire protocol, as MPICH's Hydra serves it on the socket it passes as PMI_FD: text
// lines of space-separated key=value words, "cmd=<verb> ...\n" one way and one reply line the
// other (see the note in pmi_wire_kvs.cc). Only what a bootstrap needs: init, get_maxes,
// get_my_kvsname, put, barrier_in, get, finalize.
#pragma once

#include <map>
#include <string>

#include "bootstrap/job/launcher_kvs.h"
#include "common/socket.h"

namespace hora::bootstrap {

class PmiWireKvs : public LauncherKvs {
 public:
  // Takes the inherited socket `fd` and says hello (cmd=init, version 1.1). Throws PeerError or
  // TimeoutError naming the process manager when it does not answer as PMI-1 does.
  PmiWireKvs(int fd, const common::Deadline& deadline);
  ~PmiWireKvs() override;  // cmd=finalize, briefly waiting for its acknowledgement

  std::string name() const override { return "MPICH's process manager (PMI-1 over PMI_FD)"; }
  void put(const std::string& key, const std::string& value, const common::Deadline& deadline) override;
  void fence(const common::Deadline& deadline) override;
  std::string get(int rank, const std::string& key, const common::Deadline& deadline) override;

  // One command and its reply as key=value words; the reply's cmd must be `reply`, its rc 0.
  using Words = std::map<std::string, std::string>;
  static Words parse(const std::string& line);

 private:
  Words call(const std::string& line, const std::string& reply, const common::Deadline& deadline);
  std::string readLine(const common::Deadline& deadline);

  common::Fd fd_;
  std::string kvsname_;
  size_t max_key_ = 32, max_value_ = 64;
  std::string buffered_;  // bytes after the last line read
};

}  // namespace hora::bootstrap
