// SubmissionBoard: which cached names each rank of a one-host job has submitted and waits for, in
// shared memory that every rank reads, so that only a rank that completes a name starts a cycle
// for it (Note [submission board] in the .cc).
//
// Thread safety: post, withdraw and everyonePosted may run in different processes at once (the
// words are atomics); each rank changes only its own row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hora/communicator.h"

namespace hora::engine {

class SubmissionBoard {
 public:
  // Every rank of `comm` calls it at the same point: it runs collectives. Null when some rank is
  // not reached through shared memory, when there are no slots (the response cache is off) or no
  // peers, or when some rank could not map the board (then no rank uses it).
  static std::unique_ptr<SubmissionBoard> open(Communicator& comm, int slots);
  ~SubmissionBoard();
  SubmissionBoard(const SubmissionBoard&) = delete;
  SubmissionBoard& operator=(const SubmissionBoard&) = delete;

  // This rank submitted the cached name in `slot` and waits for it to run.
  void post(int slot);
  // This rank no longer waits in `slot` (the name ran, or left the cache).
  void withdraw(int slot);
  // Whether every rank not in `standing_in` (the joined ranks, which stand in for every cached
  // name) has posted `slot`.
  bool everyonePosted(int slot, const std::vector<int>& standing_in) const;

 private:
  SubmissionBoard(void* base, size_t bytes, int rank, int size, size_t row_words);
  uint64_t* word(int rank, int slot) const;

  void* base_;
  size_t bytes_;
  int rank_, size_;
  size_t row_words_;  // a rank's row, whole cache lines so that rows share none
};

}  // namespace hora::engine
