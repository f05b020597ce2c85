// The negotiation's replicated state: every rank holds the same copy, because every rank feeds
// it the same gathered requests in the same order (Note [replicated negotiation]).
//
// Note [replicated negotiation]: Horovod sends every new request to a coordinator (rank 0),
// which decides and broadcasts the ready list. Here the ranks allgather their new requests and
// each runs the same deterministic bookkeeping on the same input, so all reach the same ready
// list, the same errors and the same cache, without the broadcast round trip. Responses are
// ordered by the arrival of their first request (rank order within a cycle).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/messages.h"

namespace hora::engine {

// A decision about one name, the same on every rank.
struct Response {
  std::string name;
  std::vector<RequestMeta> metas;  // indexed by rank
  std::string error;               // non-empty: the request fails on every rank with this text
  std::vector<int> joined;         // ranks that joined: they contribute zeros (Note [join])
  int32_t last_joined = -1;        // a join's result: the last rank to join
};

// Note [join]: a rank that calls join has run out of data. The table counts it as present for
// every allreduce (and barrier) the other ranks submit, and it takes part in those with zeros;
// Average still divides by every rank, as Horovod's does (its test expects (n-1)/n of a tensor
// that n-1 ranks submitted). Other collectives cannot be filled in with zeros, so they fail
// while a rank has joined, and at once: a joined rank submits nothing more, so they could only
// wait (the names of unnamed tensors may even differ, being numbered per rank); a cached one is
// announced afresh so that the table sees it. When every rank has joined, the join completes
// everywhere with the last rank to join and the joined set starts afresh. Since the table is
// replicated, every rank knows the joined set at the same point of the same cycle.

// Allreduce and barrier go on with zeros from the joined ranks (and join itself completes
// once every rank joined); every other collective fails while a rank has joined (Note [join]).
bool goesOnWithJoinedRanks(CollectiveKind op);

// Records that the joined ranks stand in for `r` (Note [join]); an error for collectives that
// cannot go on with joined ranks (it replaces a validation error, as in Horovod).
void standIn(Response& r, std::vector<int> joined);

// "": the ranks agree; otherwise the MismatchError text naming the tensor, the field and ranks.
std::string validate(const std::string& name, const std::vector<RequestMeta>& by_rank);

class PendingTable {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PendingTable(int size) : size_(size) {}

  // Records that `rank` submitted `meta` (from this cycle's gathered requests).
  void add(int rank, RequestMeta meta, Clock::time_point now);
  // Names every rank has submitted, validated, in arrival order; removed from the table.
  std::vector<Response> takeReady();

  struct Stall {
    std::string name;
    std::vector<int> missing;
    std::chrono::seconds waited;
  };
  std::vector<Stall> stalled(Clock::time_point now, std::chrono::seconds older_than) const;
  // Removes every name some rank has not submitted and returns them as error responses.
  std::vector<Response> failIncomplete(const std::string& why);
  bool empty() const { return entries_.empty(); }
  // When the longest-waiting name was first submitted; nullopt when nothing waits.
  std::optional<Clock::time_point> oldest() const;
  // Ranks that have joined and wait for the others (Note [join]), ascending.
  std::vector<int> joined() const;
  bool hasJoined(int rank) const { return joined_[static_cast<size_t>(rank)]; }

 private:
  struct Entry {
    std::vector<std::optional<RequestMeta>> by_rank;
    uint64_t arrival = 0;
    Clock::time_point first_seen;
    int present = 0;
  };
  int size_;
  std::vector<bool> joined_ = std::vector<bool>(static_cast<size_t>(size_), false);
  int32_t last_joined_ = -1;
  uint64_t next_arrival_ = 0;
  std::map<std::string, Entry> entries_;
};

// Note [response cache]: after a name has been executed through the full negotiation, every
// rank stores its Response in the same slot. When a rank submits that name again with the same
// fields it only sets the slot's bit in the cycle's control vector; a bitwise AND over ranks
// (a Min allreduce of bytes) tells which slots every rank has submitted, and those run without
// exchanging any request. Inserts, evictions (least recently used) and touches happen in the
// same order on every rank, so the slots stay identical.
class ResponseCache {
 public:
  explicit ResponseCache(int capacity);
  int capacity() const { return static_cast<int>(slots_.size()); }
  // One past the highest slot ever used: the control vector needs no more bytes than this.
  int highWater() const { return high_water_; }
  // The slot holding `name` if rank `rank`'s fields in it equal `mine`; -1 otherwise.
  int find(const std::string& name, int rank, const RequestMeta& mine) const;
  int slotOf(const std::string& name) const;
  const Response& at(int slot) const { return *slots_[static_cast<size_t>(slot)].response; }
  void touch(int slot);
  // Stores `r`; returns the slot it took and, if a name had to go, that name's slot (else -1).
  std::pair<int, int> insert(Response r);
  void erase(int slot);

 private:
  struct Slot {
    std::optional<Response> response;
    uint64_t last_used = 0;
  };
  std::vector<Slot> slots_;
  std::map<std::string, int> by_name_;
  uint64_t clock_ = 0;
  int high_water_ = 0;
};

}  // namespace hora::engine
