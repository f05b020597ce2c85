#include "engine/negotiation.h"

#include <algorithm>
#include <sstream>

namespace hora::engine {
namespace {

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Groups ranks by the value of a field: "rank 0, 2: float32; rank 1: float16".
template <typename F>
std::string disagreement(const std::vector<RequestMeta>& by_rank, F field) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const std::string v = field(by_rank[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) groups.push_back({v, {static_cast<int>(r)}});
    else it->second.push_back(static_cast<int>(r));
  }
  if (groups.size() == 1) return "";
  std::string out;
  for (const auto& [value, ranks] : groups) {
    out += out.empty() ? "" : "; ";
    out += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
    out += ": " + value;
  }
  return out;
}

}  // namespace

std::string validate(const std::string& name, const std::vector<RequestMeta>& by_rank) {
  const auto mismatch = [&](const std::string& field, const std::string& groups) {
    return "Mismatched " + field + " for tensor '" + name + "' across ranks: " + groups;
  };
  std::string d = disagreement(by_rank, [](const RequestMeta& m) { return std::string(toString(m.op)); });
  if (!d.empty()) return mismatch("collective operations", d);
  const CollectiveKind op = by_rank[0].op;
  d = disagreement(by_rank, [](const RequestMeta& m) { return std::string(toString(m.type)); });
  if (!d.empty()) return mismatch("data types", d);
  // Allgather and alltoall allow the first dimension to differ: compare "[*, d1, d2...]".
  const bool ragged = op == CollectiveKind::kAllgather || op == CollectiveKind::kAlltoall;
  d = disagreement(by_rank, [&](const RequestMeta& m) {
    if (!ragged || m.shape.empty()) return shapeText(m.shape);
    std::string text = "[*";
    for (size_t i = 1; i < m.shape.size(); ++i) text += ", " + std::to_string(m.shape[i]);
    return text + "]";
  });
  if (!d.empty()) return mismatch(ragged ? "shapes (beyond the first dimension)" : "shapes", d);
  if (op == CollectiveKind::kAllreduce || op == CollectiveKind::kReducescatter) {
    d = disagreement(by_rank, [](const RequestMeta& m) { return std::string(toString(m.reduce_op)); });
    if (!d.empty()) return mismatch("reduce operations", d);
    d = disagreement(by_rank, [](const RequestMeta& m) {
      std::ostringstream s;
      s << "prescale " << m.prescale << ", postscale " << m.postscale;
      return s.str();
    });
    if (!d.empty()) return mismatch("scale factors", d);
  }
  if (op == CollectiveKind::kBroadcast) {
    d = disagreement(by_rank, [](const RequestMeta& m) { return std::to_string(m.root); });
    if (!d.empty()) return mismatch("root ranks", d);
    if (by_rank[0].root < 0 || by_rank[0].root >= static_cast<int>(by_rank.size()))
      return "Invalid root rank " + std::to_string(by_rank[0].root) + " for tensor '" + name + "'";
  }
  if (op == CollectiveKind::kAlltoall) {
    for (size_t r = 0; r < by_rank.size(); ++r) {
      const auto& m = by_rank[r];
      if (m.splits.empty()) continue;
      int64_t sum = 0;
      for (int64_t s : m.splits) sum += s;
      if (m.splits.size() != by_rank.size() || sum != m.rows())
        return "Invalid splits for tensor '" + name + "' on rank " + std::to_string(r) + ": " +
               shapeText(m.splits) + " must have one entry per rank summing to the first dimension " +
               std::to_string(m.rows());
    }
  }
  return "";
}

bool goesOnWithJoinedRanks(CollectiveKind op) {
  return op == CollectiveKind::kAllreduce || op == CollectiveKind::kBarrier || op == CollectiveKind::kJoin;
}

void standIn(Response& r, std::vector<int> joined) {
  const CollectiveKind op = r.metas[0].op;
  // Before any disagreement among the other ranks (a broadcast's roots, say): Horovod reports
  // the join first too.
  if (!goesOnWithJoinedRanks(op)) {
    std::string ranks;
    for (int x : joined) ranks += (ranks.empty() ? "" : ", ") + std::to_string(x);
    r.error = "Tensor '" + r.name + "': " + std::string(toString(op)) + " cannot run while rank(s) " + ranks +
              " have joined; only allreduce and barrier go on with joined ranks";
  }
  r.joined = std::move(joined);
}

void PendingTable::add(int rank, RequestMeta meta, Clock::time_point now) {
  auto [it, inserted] = entries_.try_emplace(meta.name);
  Entry& e = it->second;
  if (inserted) {
    e.by_rank.resize(static_cast<size_t>(size_));
    e.arrival = next_arrival_++;
    e.first_seen = now;
  }
  if (meta.op == CollectiveKind::kJoin) {
    joined_[static_cast<size_t>(rank)] = true;
    last_joined_ = rank;
  }
  auto& slot = e.by_rank[static_cast<size_t>(rank)];
  if (!slot) ++e.present;
  slot = std::move(meta);
}

std::vector<int> PendingTable::joined() const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r)
    if (joined_[static_cast<size_t>(r)]) out.push_back(r);
  return out;
}

std::vector<Response> PendingTable::takeReady() {
  std::vector<std::pair<uint64_t, Response>> ready;
  bool join_done = false;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    // Joined ranks that did not submit the name stand in for it (Note [join]).
    std::vector<int> stand_ins;
    for (int r = 0; r < size_; ++r)
      if (joined_[static_cast<size_t>(r)] && !e.by_rank[static_cast<size_t>(r)]) stand_ins.push_back(r);
    const RequestMeta* some = nullptr;
    for (const auto& m : e.by_rank)
      if (m && !some) some = &*m;
    // A joined rank submits nothing until every rank has joined: a name it lacks that cannot
    // run with zeros in its place fails now, on the ranks that submitted it, instead of waiting
    // for the others (whose names may differ: unnamed tensors are numbered per rank).
    const bool blocked_by_join = some && !stand_ins.empty() && !goesOnWithJoinedRanks(some->op);
    if (!some || (!blocked_by_join && e.present + static_cast<int>(stand_ins.size()) < size_)) {
      ++it;
      continue;
    }
    Response r{it->first, {}, ""};
    const RequestMeta fill = *some;
    for (auto& m : e.by_rank) r.metas.push_back(m ? std::move(*m) : fill);
    if (!blocked_by_join) r.error = validate(r.name, r.metas);
    if (!stand_ins.empty()) standIn(r, std::move(stand_ins));
    if (r.metas[0].op == CollectiveKind::kJoin) {
      r.last_joined = last_joined_;
      join_done = true;
    }
    ready.push_back({e.arrival, std::move(r)});
    it = entries_.erase(it);
  }
  if (join_done) std::fill(joined_.begin(), joined_.end(), false);
  std::sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Response> out;
  for (auto& [arrival, r] : ready) out.push_back(std::move(r));
  return out;
}

std::vector<PendingTable::Stall> PendingTable::stalled(Clock::time_point now,
                                                       std::chrono::seconds older_than) const {
  std::vector<Stall> out;
  for (const auto& [name, e] : entries_) {
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - e.first_seen);
    if (waited < older_than) continue;
    Stall s{name, {}, waited};
    for (size_t r = 0; r < e.by_rank.size(); ++r)
      if (!e.by_rank[r]) s.missing.push_back(static_cast<int>(r));
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<PendingTable::Clock::time_point> PendingTable::oldest() const {
  std::optional<Clock::time_point> out;
  for (const auto& [name, e] : entries_) {
    if (!out || e.first_seen < *out) out = e.first_seen;
  }
  return out;
}

std::vector<Response> PendingTable::failIncomplete(const std::string& why) {
  std::vector<Response> out;
  for (auto& [name, e] : entries_) out.push_back({name, {}, why});
  entries_.clear();
  return out;
}

ResponseCache::ResponseCache(int capacity) : slots_(static_cast<size_t>(std::max(capacity, 0))) {}

int ResponseCache::slotOf(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int ResponseCache::find(const std::string& name, int rank, const RequestMeta& mine) const {
  const int slot = slotOf(name);
  if (slot < 0) return -1;
  return at(slot).metas[static_cast<size_t>(rank)] == mine ? slot : -1;
}

void ResponseCache::touch(int slot) { slots_[static_cast<size_t>(slot)].last_used = ++clock_; }

std::pair<int, int> ResponseCache::insert(Response r) {
  if (slots_.empty()) return {-1, -1};
  if (int existing = slotOf(r.name); existing >= 0) erase(existing);
  int free = -1, oldest = 0;
  for (int s = 0; s < capacity(); ++s) {
    const auto& slot = slots_[static_cast<size_t>(s)];
    if (!slot.response) { free = s; break; }
    if (slot.last_used < slots_[static_cast<size_t>(oldest)].last_used) oldest = s;
  }
  int evicted = -1;
  if (free < 0) {
    erase(oldest);
    free = evicted = oldest;
  }
  by_name_[r.name] = free;
  high_water_ = std::max(high_water_, free + 1);
  slots_[static_cast<size_t>(free)].response = std::move(r);
  touch(free);
  return {free, evicted};
}

void ResponseCache::erase(int slot) {
  auto& s = slots_[static_cast<size_t>(slot)];
  if (!s.response) return;
  by_name_.erase(s.response->name);
  s.response.reset();
}

}  // namespace hora::engine
