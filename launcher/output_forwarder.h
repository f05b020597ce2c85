// OutputForwarder: carries every worker's stdout and stderr to horarun's, a whole line at a time,
// prefixed "[rank]<stdout>:" or "[rank]<stderr>:", so lines of different ranks never interleave
// mid-line. With an output directory it also writes DIR/rank.<N>/stdout and .../stderr, byte for
// byte as the worker wrote them.
//
// Note [carriage returns]: a progress bar (tqdm) redraws its line with "\r" and no newline.
// A "\r" ends a piece as a newline does, and the piece goes out at once with its prefix and the
// "\r", so the next piece of that stream overwrites it on a terminal; text that follows a "\r"
// goes out as soon as the worker stops writing (tqdm writes "\r" + bar, then flushes), so bars
// move live. Before another stream's piece is written where a "\r" piece is still showing, a
// newline keeps the bar on its own line: pieces of different ranks never share a line.
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
  // `timestamp`: each piece's prefix starts with the time, as horovodrun's
  // --prefix-output-with-timestamp ("Mon Nov 23 22:54:55 2026[0]<stdout>:...").
  explicit OutputForwarder(std::string output_dir = {}, bool timestamp = false);
  ~OutputForwarder();

  // Makes the pipes for one worker; returns the write ends for the child's fd 1 and 2.
  // `prefixed`: a host agent's, whose lines carry their rank's prefix already.
  std::pair<common::Fd, common::Fd> addWorker(int rank, bool prefixed = false);
  // Forwards what arrived, waiting up to `wait` for something to arrive. Returns false when
  // every pipe has reached end of file.
  bool pump(std::chrono::milliseconds wait);
  // Forwards until every pipe is closed or `limit` passes (after the workers exited).
  void drain(std::chrono::milliseconds limit);
  // From now on the worker `rank` (or a host agent's rank) is shown as "[label]": an elastic
  // worker's rank changes with each generation.
  void relabel(int rank, std::string label) { labels_[rank] = std::move(label); }

 private:
  struct Stream {
    int rank;
    bool is_stderr;
    common::Fd fd;
    std::string partial;        // bytes after the last "\n" or "\r"
    bool after_cr = false;      // partial follows a "\r": a progress bar's redraw
    std::FILE* file = nullptr;  // in output_dir, or null
    bool prefixed = false;
  };
  std::FILE* fileOf(int rank, bool is_stderr);  // a host agent's rank's, opened on first use
  // Writes one piece of s with its prefix, ended by `end` ('\n' or '\r').
  void emit(Stream& s, std::string_view piece, char end);
  void readFrom(Stream& s);
  int sinkOf(const Stream& s) const { return s.is_stderr && !same_sink_ ? 1 : 0; }

  std::string labelOf(int rank) const {
    auto it = labels_.find(rank);
    return it == labels_.end() ? std::to_string(rank) : it->second;
  }

  std::map<int, std::string> labels_;  // relabel()
  std::string output_dir_;
  bool timestamp_ = false;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::map<std::pair<int, bool>, std::FILE*> agent_files_;  // by rank and stderr-ness
  bool same_sink_ = false;                        // horarun's stdout and stderr are one file (a terminal)
  const Stream* showing_cr_[2] = {nullptr, nullptr};  // by sink: whose "\r" piece ends it
};

}  // namespace hora::launcher
