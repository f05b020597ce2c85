#include "engine/submission_board.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>

#include "common/logging.h"
#include "hora/errors.h"
#include "common/shared_segment.h"

namespace hora::engine {

// Note [submission board]: without it, a rank that submits a cached name starts a cycle at once
// (Note [idle engine]), and every rank's engine thread must wake to join it, although the cycle
// can run the name only if this rank was the last to submit it. When ranks drift apart within a
// step, as ranks sharing cores do, each gradient then costs up to one cycle per rank: at 4 ranks
// on 2 cores, 24-26 cycles per step for 8 gradients, each waking 4 engine threads that wait for a
// core (docs/benchmarks/README.md). On one host the ranks can instead see each other's
// submissions without a message: each rank has a row of bits in one shared segment, a bit per
// response-cache slot, set while the rank waits in that slot (the Negotiator keeps its row equal
// to its cached_waiting_). A rank that admits a cached name starts a cycle only if every rank
// has posted some slot it waits in; otherwise it goes back to sleep, and the rank that
// completes the slot starts the cycle.
//
// Why a completed slot always starts a cycle: each rank posts its bit (an atomic read-modify-write)
// and then reads the others' (sequentially consistent), so of the last two ranks to post, the
// later one sees every bit set. A rank withdraws a bit only when the name ran or left the cache
// (then it is announced in full, which starts a cycle), never while the others may still count
// on it. Bits can be stale the other way (a rank has not yet withdrawn a slot that just ran and
// is already posting it again): that costs at most a cycle that finds nothing to run. The board
// decides only when to cycle; what runs is still decided by the control allreduce.
// Joined ranks stand in for every cached name (Note [join]); the replicated table says who they
// are, so a rank counts them as having posted.

namespace {

constexpr size_t kCacheLineWords = 64 / sizeof(uint64_t);
constexpr size_t kNameBytes = 64;

std::atomic_ref<uint64_t> atomicAt(uint64_t* word) { return std::atomic_ref<uint64_t>(*word); }

}  // namespace

std::unique_ptr<SubmissionBoard> SubmissionBoard::open(Communicator& comm, int slots) {
  const int rank = comm.rank(), size = comm.size();
  if (size < 2 || slots <= 0 || !comm.planTuning().shared_memory) return nullptr;
  const size_t words = (static_cast<size_t>(slots) + 63) / 64;
  const size_t row_words = (words + kCacheLineWords - 1) / kCacheLineWords * kCacheLineWords;
  const size_t bytes = static_cast<size_t>(size) * row_words * sizeof(uint64_t);
  // Rank 0 makes the segment (zeroed: nothing posted) and tells the others its name; an empty
  // name, or any rank's failure to map it, leaves every rank without a board.
  std::array<char, kNameBytes> name{};
  void* base = nullptr;
  if (rank == 0) {
    try {
      auto [made, p] = common::createSegment(bytes);
      if (made.size() < kNameBytes) {
        std::memcpy(name.data(), made.data(), made.size());
        base = p;
      } else {
        ::munmap(p, bytes);
        ::shm_unlink(made.c_str());
      }
    } catch (const Error& e) {
      HORA_LOG(warn, "no submission board (Note [submission board]): {}", e.what());
    }
  }
  comm.broadcast(name.data(), name.size(), DataType::kUInt8, 0);
  if (name[0] == '\0') return nullptr;
  if (rank != 0) {
    try {
      base = common::mapSegment(name.data(), bytes, 0);
    } catch (const Error& e) {
      HORA_LOG(warn, "no submission board (Note [submission board]): {}", e.what());
    }
  }
  uint8_t mapped = base != nullptr;
  AllreduceOptions min;
  min.op = ReduceOp::kMin;
  comm.allreduce(&mapped, &mapped, 1, DataType::kUInt8, min);  // also: every rank has mapped it
  if (rank == 0) ::shm_unlink(name.data());
  if (!mapped) {
    if (base) ::munmap(base, bytes);
    return nullptr;
  }
  return std::unique_ptr<SubmissionBoard>(new SubmissionBoard(base, bytes, rank, size, row_words));
}

SubmissionBoard::SubmissionBoard(void* base, size_t bytes, int rank, int size, size_t row_words)
    : base_(base), bytes_(bytes), rank_(rank), size_(size), row_words_(row_words) {}

SubmissionBoard::~SubmissionBoard() { ::munmap(base_, bytes_); }

uint64_t* SubmissionBoard::word(int rank, int slot) const {
  return static_cast<uint64_t*>(base_) + static_cast<size_t>(rank) * row_words_ + static_cast<size_t>(slot) / 64;
}

void SubmissionBoard::post(int slot) { atomicAt(word(rank_, slot)).fetch_or(uint64_t{1} << (slot % 64)); }

void SubmissionBoard::withdraw(int slot) { atomicAt(word(rank_, slot)).fetch_and(~(uint64_t{1} << (slot % 64))); }

bool SubmissionBoard::everyonePosted(int slot, const std::vector<int>& standing_in) const {
  const uint64_t bit = uint64_t{1} << (slot % 64);
  for (int r = 0; r < size_; ++r) {
    if (std::find(standing_in.begin(), standing_in.end(), r) != standing_in.end()) continue;
    if (!(atomicAt(word(r, slot)).load() & bit)) return false;
  }
  return true;
}

}  // namespace hora::engine
