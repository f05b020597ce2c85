// OutputForwarder: carries every worker's stdout and stderr to horarun's, a whole line at a time,
// prefixed "[rank]<stdout>:" or "[rank]<stderr>:", so lines of different ranks never interleave
// mid-line. With an output directory it also writes DIR/rank.<N>/stdout and .../stderr.
//
// Single-threaded: the WorkerSet's wait loop calls pump() between its checks on the children.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/socket.h"

namespace hora::launcher {

class OutputForwarder {
 public:
  explicit OutputForwarder(std::string output_dir = {}) : output_dir_(std::move(output_dir)) {}
  ~OutputForwarder();

  // Makes the pipes for one worker; returns the write ends for the child's fd 1 and 2.
  // `prefixed`: a host agent's, whose lines carry their rank's prefix already.
  std::pair<common::Fd, common::Fd> addWorker(int rank, bool prefixed = false);
  // Forwards what arrived, waiting up to `wait` for something to arrive. Returns false when
  // every pipe has reached end of file.
  bool pump(std::chrono::milliseconds wait);
  // Forwards until every pipe is closed or `limit` passes (after the workers exited).
  void drain(std::chrono::milliseconds limit);

 private:
  struct Stream {
    int rank;
    bool is_stderr;
    common::Fd fd;
    std::string partial;  // bytes after the last newline
    std::FILE* file = nullptr;  // in output_dir, or null
    bool prefixed = false;
  };
  std::FILE* fileOf(int rank, bool is_stderr);  // in output_dir, opened on first use
  void emit(Stream& s, std::string_view line);
  void readFrom(Stream& s);

  std::string output_dir_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::map<std::pair<int, bool>, std::FILE*> agent_files_;  // by rank and stderr-ness
};

}  // namespace hora::launcher
