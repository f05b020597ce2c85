#include "launcher/elastic_planner.h"

#include <algorithm>
#include <limits>

namespace hora::launcher {

ElasticPlanner::ElasticPlanner(
    ElasticLimits limits,
    std::function<std::chrono::milliseconds(std::chrono::milliseconds, std::chrono::milliseconds)> draw_cooldown)
    : limits_(limits), draw_cooldown_(std::move(draw_cooldown)) {}

int ElasticPlanner::rankOf(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? -1 : it->second.rank;
}

bool ElasticPlanner::blacklisted(const std::string& host, Time now) const {
  auto it = blacklist_.find(host);
  return it != blacklist_.end() && (!it->second || now < *it->second);
}

bool ElasticPlanner::usable(const std::string& host, Time now) const {
  const bool discovered = std::any_of(hosts_.begin(), hosts_.end(), [&](const HostSlots& h) { return h.host == host; });
  return discovered && !blacklisted(host, now);
}

bool ElasticPlanner::noHostCanReturn() const {
  // A discovery script that lists no host may list some later; one whose every host is
  // blacklisted for good is taken at its word, as horovodrun does.
  return !hosts_.empty() && std::all_of(hosts_.begin(), hosts_.end(), [&](const HostSlots& h) {
           auto it = blacklist_.find(h.host);
           return it != blacklist_.end() && !it->second;
         });
}

void ElasticPlanner::noteWaitForCooldown(Time now, Decisions& d) {
  if (waiting_noted_) return;
  std::optional<std::pair<Time, std::string>> first_back;
  for (const HostSlots& h : hosts_) {
    if (!blacklisted(h.host, now)) return;  // a usable host: its workers are starting
    const auto& until = blacklist_.at(h.host);
    if (until && (!first_back || *until < first_back->first)) first_back = {*until, h.host};
  }
  if (!first_back) return;
  waiting_noted_ = true;
  const auto in = std::chrono::duration_cast<std::chrono::seconds>(first_back->first - now).count();
  d.notes.push_back("no host can run a worker now: waiting for host " + first_back->second +
                    " to come back from its blacklisting in " + std::to_string(in) + " s (the job ends after --elastic-timeout " +
                    std::to_string(limits_.elastic_timeout.count() / 1000) + " s with fewer than --min-np workers)");
}

bool ElasticPlanner::ranksBefore(const Tracked& a, const Tracked& b) const {
  const int ra = a.rank < 0 ? std::numeric_limits<int>::max() : a.rank;
  const int rb = b.rank < 0 ? std::numeric_limits<int>::max() : b.rank;
  if (ra != rb) return ra < rb;
  const auto host_index = [&](const std::string& host) {
    return std::find_if(hosts_.begin(), hosts_.end(), [&](const HostSlots& x) { return x.host == host; }) - hosts_.begin();
  };
  if (host_index(a.worker.host) != host_index(b.worker.host)) return host_index(a.worker.host) < host_index(b.worker.host);
  return a.worker.slot < b.worker.slot;
}

std::map<std::string, ElasticPlanner::Placement> ElasticPlanner::plannedPlacements(Time now) const {
  std::vector<const Tracked*> live;
  for (const auto& [id, t] : workers_)
    if (t.state != State::kLeaving && !blacklisted(t.worker.host, now)) live.push_back(&t);
  std::stable_sort(live.begin(), live.end(), [&](const Tracked* a, const Tracked* b) { return ranksBefore(*a, *b); });
  if (static_cast<int>(live.size()) > limits_.max_np) live.resize(static_cast<size_t>(limits_.max_np));
  std::map<std::string, Placement> out;
  std::map<std::string, int> on_host;            // workers placed so far on each host
  std::vector<std::string> hosts_in_order;       // hosts in the order of their first rank
  for (size_t r = 0; r < live.size(); ++r) {
    const std::string& host = live[r]->worker.host;
    if (!on_host.count(host)) hosts_in_order.push_back(host);
    Placement& p = out[live[r]->worker.id];
    p.rank = static_cast<int>(r);
    p.size = static_cast<int>(live.size());
    p.local_rank = on_host[host]++;
  }
  for (auto& [id, p] : out) {
    const std::string& host = workers_.at(id).worker.host;
    p.local_size = on_host[host];
    // Cross: the hosts that have a worker of this local rank, in rank order.
    p.cross_size = p.cross_rank = 0;
    for (const std::string& h : hosts_in_order) {
      if (on_host[h] <= p.local_rank) continue;
      if (h == host) p.cross_rank = p.cross_size;
      ++p.cross_size;
    }
  }
  return out;
}

int ElasticPlanner::liveCount() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const auto& w) { return w.second.state != State::kLeaving; }));
}

void ElasticPlanner::stopWorker(Tracked& t, const std::string& why, Decisions& d) {
  if (t.rank >= 0 && generation_ >= 0)
    d.reports.push_back({generation_, t.rank, "horarun stopped worker " + t.worker.id + ": " + why});
  t.state = State::kLeaving;
  t.rank = -1;
  d.stop.push_back(t.worker.id);
}

void ElasticPlanner::answerRemoved(Tracked& t, const std::string& why, Decisions& d) {
  t.state = State::kLeaving;  // it exits with code 0 once told
  t.rank = -1;
  d.answers.emplace_back(t.worker.id, t.nonce);
  d.answer_values.push_back("removed " + why);
}

void ElasticPlanner::blacklist(const std::string& host, const std::string& why, Time now, Decisions& d) {
  if (limits_.cooldown_max.count() <= 0) {
    blacklist_[host] = std::nullopt;
    d.notes.push_back("host " + host + " is blacklisted for good: " + why);
    return;
  }
  const auto cooldown = draw_cooldown_(limits_.cooldown_min, limits_.cooldown_max);
  blacklist_[host] = now + cooldown;
  d.notes.push_back("host " + host + " is blacklisted for " + std::to_string(cooldown.count() / 1000) + " s: " + why);
}

void ElasticPlanner::announce(const std::string& kind, Decisions& d) {
  announced_ = announced_.empty() || announced_ == kind ? kind : "mixed";
  d.hosts_updated = announced_;
}

void ElasticPlanner::end(int code, const std::string& reason, Decisions& d) {
  ended_ = true;
  d.end_code = code;
  d.end_reason = reason;
  for (auto& [id, t] : workers_)
    if (t.state != State::kLeaving) stopWorker(t, reason.empty() ? "the job ended" : reason, d);
}

void ElasticPlanner::startWorkers(Time now, Decisions& d) {
  if (finished_ || ended_) return;
  int live = liveCount();
  for (const HostSlots& h : hosts_) {
    if (blacklisted(h.host, now)) continue;
    for (int slot = 0; slot < h.slots && live < limits_.max_np; ++slot) {
      const std::string id = h.host + ":" + std::to_string(slot);
      if (workers_.count(id)) continue;
      Tracked t;
      t.worker = {id, h.host, slot, {}};
      workers_[id] = t;
      d.start.push_back(t.worker);
      ++live;
    }
  }
  if (d.start.empty()) return;
  waiting_noted_ = false;
  const auto places = plannedPlacements(now);
  for (Worker& w : d.start)
    if (auto p = places.find(w.id); p != places.end()) w.started_as = workers_[w.id].worker.started_as = p->second;
}

void ElasticPlanner::hostsDiscovered(const std::vector<HostSlots>& hosts, Time now, Decisions& d) {
  hosts_ = hosts;
  bool members_removed = false;
  for (auto& [id, t] : workers_) {
    if (t.state == State::kLeaving || usable(t.worker.host, now)) continue;
    // Also a slot beyond the host's new count is gone.
    if (t.state == State::kJoined) {
      answerRemoved(t, "its host " + t.worker.host + " is no longer in the discovered hosts", d);
    } else if (t.state == State::kMember) {
      members_removed = true;  // it re-joins at its next commit and is told then
    } else {
      stopWorker(t, "its host " + t.worker.host + " left the job", d);
    }
  }
  for (auto& [id, t] : workers_) {
    if (t.state == State::kLeaving || !usable(t.worker.host, now)) continue;
    auto h = std::find_if(hosts_.begin(), hosts_.end(), [&](const HostSlots& x) { return x.host == t.worker.host; });
    if (t.worker.slot < h->slots) continue;
    if (t.state == State::kJoined) answerRemoved(t, "its host " + t.worker.host + " has fewer slots now", d);
    else if (t.state == State::kMember) members_removed = true;
    else stopWorker(t, "its host " + t.worker.host + " has fewer slots now", d);
  }
  if (members_removed) announce("removed", d);
  startWorkers(now, d);
}

void ElasticPlanner::joined(const std::string& id, const std::string& nonce, Time now, Decisions& d) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state == State::kLeaving) return;
  Tracked& t = it->second;
  t.nonce = nonce;
  if (finished_ || ended_) {
    answerRemoved(t, "training has finished", d);
    return;
  }
  auto h = std::find_if(hosts_.begin(), hosts_.end(), [&](const HostSlots& x) { return x.host == t.worker.host; });
  if (!usable(t.worker.host, now) || t.worker.slot >= h->slots) {
    answerRemoved(t, "its host " + t.worker.host + " was removed from the job", d);
    return;
  }
  const bool newcomer = t.state == State::kStarting;
  t.state = State::kJoined;
  if (!first_pending_) first_pending_ = now;
  // A running generation learns of the newcomer at its next commit.
  const bool running = std::any_of(workers_.begin(), workers_.end(),
                                   [](const auto& w) { return w.second.state == State::kMember; });
  if (newcomer && running) announce("added", d);
}

void ElasticPlanner::exited(const std::string& id, bool failed, const std::string& why, Time now, Decisions& d) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  const Tracked t = it->second;
  workers_.erase(it);
  if (t.state == State::kLeaving || ended_) {
    if (finished_ && workers_.empty() && !ended_) end(0, "", d);
    return;
  }
  if (!failed) {
    finished_ = true;
    for (auto& [other_id, other] : workers_) {
      if (other.state == State::kJoined) answerRemoved(other, "training has finished", d);
      else if (other.state == State::kStarting) stopWorker(other, "training has finished", d);
    }
  } else {
    blacklist(t.worker.host, why, now, d);
    for (auto& [other_id, other] : workers_) {
      if (other.worker.host != t.worker.host || other.state == State::kLeaving) continue;
      if (other.state == State::kJoined) answerRemoved(other, "its host " + t.worker.host + " is blacklisted: " + why, d);
      else stopWorker(other, "its host " + t.worker.host + " is blacklisted: " + why, d);
    }
  }
  if (finished_ && workers_.empty()) end(0, "", d);
  if (!finished_ && liveCount() < limits_.min_np && !short_since_) short_since_ = now;
}

void ElasticPlanner::tick(Time now, Decisions& d) {
  if (ended_) return;
  if (finished_) {
    if (workers_.empty()) end(0, "", d);
    return;
  }
  for (auto it = blacklist_.begin(); it != blacklist_.end();)  // cooldowns that ended
    it = it->second && now >= *it->second ? blacklist_.erase(it) : std::next(it);
  startWorkers(now, d);

  const int live = liveCount();
  if (live >= limits_.min_np) {
    short_since_.reset();
  } else {
    if (!short_since_) short_since_ = now;
    if (noHostCanReturn()) {
      end(1, "only " + std::to_string(live) + " worker(s) left, fewer than --min-np " + std::to_string(limits_.min_np) +
                 ", and every host is blacklisted for good (" +
                 (limits_.fixed_hosts ? "no --host-discovery-script can add one"
                                      : "every host the --host-discovery-script lists") +
                 ", no --blacklist-cooldown-range lets one back)",
          d);
      return;
    }
    noteWaitForCooldown(now, d);
    if (now - *short_since_ >= limits_.elastic_timeout) {
      end(1, "only " + std::to_string(live) + " worker(s) available, fewer than --min-np " +
                 std::to_string(limits_.min_np) + ", for longer than --elastic-timeout " +
                 std::to_string(limits_.elastic_timeout.count() / 1000) + " s (blacklisted hosts: " +
                 std::to_string(blacklist_.size()) + ")",
          d);
      return;
    }
  }
  int pending = 0, waiting_for = 0;
  for (const auto& [id, t] : workers_) {
    if (t.state == State::kJoined) ++pending;
    else if (t.state != State::kLeaving) ++waiting_for;
  }
  if (pending == 0) return;
  const bool window_passed = first_pending_ && now - *first_pending_ >= limits_.join_window;
  if ((waiting_for == 0 || window_passed) && pending >= limits_.min_np) formGeneration(now, d);
}

void ElasticPlanner::leaveBehind(Tracked& t, const std::string& why, Time now, Decisions& d) {
  blacklist(t.worker.host,
            "worker " + t.worker.id + " (rank " + std::to_string(t.rank) + " of generation " +
                std::to_string(generation_) + ") " + why + "; it is stopped",
            now, d);
  stopWorker(t, why, d);
}

void ElasticPlanner::declaredDead(int rank, const std::string& why, Time now, Decisions& d) {
  for (auto& [id, t] : workers_) {
    if (t.state == State::kMember && t.rank == rank) leaveBehind(t, "was declared dead by its peers: " + why, now, d);
  }
}

void ElasticPlanner::formGeneration(Time now, Decisions& d) {
  // Members that did not re-join within the window are stuck (stopped, or their link is down).
  for (auto& [id, t] : workers_) {
    if (t.state != State::kMember) continue;
    leaveBehind(t, "did not ask to join the next generation within the join window " +
                       std::to_string(limits_.join_window.count() / 1000) + " s",
                now, d);
  }
  std::vector<Tracked*> joining;
  for (auto& [id, t] : workers_)
    if (t.state == State::kJoined && !blacklisted(t.worker.host, now)) joining.push_back(&t);
  std::stable_sort(joining.begin(), joining.end(), [&](const Tracked* a, const Tracked* b) { return ranksBefore(*a, *b); });
  if (static_cast<int>(joining.size()) > limits_.max_np) joining.resize(static_cast<size_t>(limits_.max_np));
  if (static_cast<int>(joining.size()) < limits_.min_np) return;
  if (generation_ >= 0 && limits_.reset_limit >= 0 && resets_ + 1 > limits_.reset_limit) {
    end(1, "the job was reset " + std::to_string(resets_) + " time(s) and --reset-limit is " +
               std::to_string(limits_.reset_limit),
        d);
    return;
  }
  if (generation_ >= 0) ++resets_;
  ++generation_;
  for (auto& [id, t] : workers_) t.rank = -1;
  const int size = static_cast<int>(joining.size());
  for (int r = 0; r < size; ++r) {
    Tracked& t = *joining[static_cast<size_t>(r)];
    t.state = State::kMember;
    t.rank = r;
    d.answers.emplace_back(t.worker.id, t.nonce);
    d.answer_values.push_back(std::to_string(generation_) + " " + std::to_string(r) + " " + std::to_string(size));
  }
  first_pending_.reset();
  for (const auto& [id, t] : workers_)
    if (t.state == State::kJoined) first_pending_ = now;  // over --max-np: they wait for the next one
  announced_.clear();
  d.generation_formed = true;
}

}  // namespace hora::launcher
