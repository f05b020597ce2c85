#include "engine/negotiator.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace hora::engine {

using Clock = PendingTable::Clock;

Negotiator::Negotiator(Communicator& comm, Tracer& tracer, int cache_capacity)
    : comm_(comm), tracer_(tracer), rank_(comm.rank()), size_(comm.size()), table_(size_), cache_(cache_capacity) {}

void Negotiator::admit(std::vector<Submission> fresh) {
  for (auto& l : fresh) {
    const std::string name = l.meta.name;  // not in flight: the Runtime refuses a second enqueue
    tracer_.begin(name, "NEGOTIATE_" + eventNameOf(l.meta.op));
    const int slot = cache_enabled_ ? cache_.find(name, rank_, l.meta) : -1;
    in_flight_.emplace(name, std::move(l));
    if (slot >= 0) waitInSlot(slot, name);
    else to_announce_.push_back(name);
  }
  // While a rank has joined, a cached name that cannot run with it could only wait for its slot:
  // announced in full, the table fails it at once (Note [join]).
  if (table_.joined().empty()) return;
  for (auto it = cached_waiting_.begin(); it != cached_waiting_.end();) {
    if (goesOnWithJoinedRanks(cache_.at(it->first).metas[0].op)) {
      ++it;
      continue;
    }
    const auto next = std::next(it);
    announceInstead(it);
    it = next;
  }
}

void Negotiator::useBoard(std::unique_ptr<SubmissionBoard> board) {
  board_ = std::move(board);
  if (board_)
    for (const auto& [slot, name] : cached_waiting_) board_->post(slot);
}

bool Negotiator::someCachedNameIsComplete() const {
  if (!board_) return false;
  const std::vector<int> joined = table_.joined();
  for (const auto& [slot, name] : cached_waiting_)
    if (board_->everyonePosted(slot, joined)) return true;
  return false;
}

void Negotiator::waitInSlot(int slot, const std::string& name) {
  cached_waiting_[slot] = name;
  if (board_) board_->post(slot);
}

std::map<int, std::string>::iterator Negotiator::stopWaiting(std::map<int, std::string>::iterator it) {
  if (board_) board_->withdraw(it->first);
  return cached_waiting_.erase(it);
}

void Negotiator::announceInstead(std::map<int, std::string>::iterator it) {
  to_announce_.push_back(it->second);
  stopWaiting(it);
}

ControlVector Negotiator::controlVector() const {
  // The cache is the same on every rank, so its high-water mark agrees too: bytes beyond it
  // would always be 0.
  ControlVector control(cache_.highWater());
  for (const auto& [slot, name] : cached_waiting_) control.markSubmitted(slot);
  // A rank that joined stands in for every cached name (Note [join]).
  if (table_.hasJoined(rank_)) control.markEverySlotSubmitted();
  if (hasAnnouncements()) control.markAnnouncing();
  return control;
}

std::vector<Response> Negotiator::takeCached(const ControlVector& agreed) {
  const std::vector<int> joined = table_.joined();
  std::vector<Response> ready;
  for (int slot = 0; slot < agreed.slots(); ++slot) {
    if (!agreed.everyRankSubmitted(slot)) continue;
    cache_.touch(slot);
    ready.push_back(cache_.at(slot));
    if (!joined.empty()) standIn(ready.back(), joined);
    if (auto it = cached_waiting_.find(slot); it != cached_waiting_.end()) stopWaiting(it);
  }
  return ready;
}

namespace {

// Allgathers every rank's encoded requests; returns them and each rank's byte count.
std::vector<uint8_t> allgatherRequests(Communicator& comm, const std::vector<uint8_t>& mine,
                                       std::vector<size_t>& counts) {
  const size_t size = static_cast<size_t>(comm.size());
  const std::vector<size_t> one(size, 1);
  std::vector<int64_t> lengths(size);
  const int64_t my_length = static_cast<int64_t>(mine.size());
  comm.allgather(&my_length, 1, lengths.data(), one, DataType::kInt64);
  counts.assign(lengths.begin(), lengths.end());
  std::vector<uint8_t> all(std::accumulate(counts.begin(), counts.end(), size_t{0}) + 1);
  comm.allgather(mine.data(), mine.size(), all.data(), counts, DataType::kUInt8);
  return all;
}

}  // namespace

void Negotiator::negotiateInFull(std::vector<Response>& ready, std::vector<std::string>& fully_negotiated) {
  std::vector<uint8_t> mine;
  std::set<std::string> announced;
  for (const auto& name : to_announce_) {
    // A name may have been queued twice (evicted from the cache, then announced) or have
    // finished meanwhile (failed by an error response): announce what is in flight, once.
    auto it = in_flight_.find(name);
    if (it != in_flight_.end() && announced.insert(name).second) encode(it->second.meta, mine);
  }
  to_announce_.clear();
  std::vector<size_t> counts;
  const std::vector<uint8_t> all = allgatherRequests(comm_, mine, counts);
  const auto now = Clock::now();
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    const auto metas = decodeAll({all.data() + offset, counts[static_cast<size_t>(r)]});
    offset += counts[static_cast<size_t>(r)];
    for (auto m : metas) {
      // A name negotiated afresh leaves the cache on every rank; a rank that submitted it
      // through the cache announces it again next cycle.
      if (const int slot = cache_.slotOf(m.name); slot >= 0) {
        cache_.erase(slot);
        if (auto it = cached_waiting_.find(slot); it != cached_waiting_.end()) announceInstead(it);
      }
      if (tracer_.active()) tracer_.mark(m.name, "rank " + std::to_string(r) + " ready");
      table_.add(r, std::move(m), now);
    }
  }
  for (auto& r : table_.takeReady()) {
    if (r.error.empty()) fully_negotiated.push_back(r.name);
    ready.push_back(std::move(r));
  }
}

void Negotiator::remember(std::vector<Response>& ready, const std::vector<std::string>& fully_negotiated) {
  if (!cache_enabled_) return;
  for (auto& r : ready) {
    // A response with stand-ins, or a join, is not what the next step will submit.
    if (!r.error.empty() || !r.joined.empty() || r.metas[0].op == CollectiveKind::kJoin ||
        std::find(fully_negotiated.begin(), fully_negotiated.end(), r.name) == fully_negotiated.end())
      continue;
    auto [slot, evicted] = cache_.insert(std::move(r));
    if (evicted >= 0)
      if (auto it = cached_waiting_.find(evicted); it != cached_waiting_.end()) announceInstead(it);
  }
}

Submission* Negotiator::inFlight(const std::string& name) {
  auto it = in_flight_.find(name);
  return it == in_flight_.end() ? nullptr : &it->second;
}

std::optional<Submission> Negotiator::release(const std::string& name) {
  auto it = in_flight_.find(name);
  if (it == in_flight_.end()) return std::nullopt;
  for (auto c = cached_waiting_.begin(); c != cached_waiting_.end(); ++c) {
    if (c->second == name) {
      stopWaiting(c);
      break;
    }
  }
  // Last: `name` may be the submission's own.
  std::optional<Submission> done(std::move(it->second));
  in_flight_.erase(it);
  return done;
}

void Negotiator::failAll(std::exception_ptr error) {
  for (auto& [name, l] : in_flight_) l.state->complete(error);
  in_flight_.clear();
  for (auto it = cached_waiting_.begin(); it != cached_waiting_.end();) it = stopWaiting(it);
}

}  // namespace hora::engine
