// ElasticPlanner: the decisions of horarun's elastic driver (docs/elastic.md), with no processes,
// sockets or clocks of its own, so that every rule is unit-tested (tests/cpp/launcher/elastic_planner_test.cc).
//
// Events go in (hosts discovered, a worker joined, a worker exited, time passed); each call
// appends what the driver must do to a Decisions: start or stop workers, answer joins, announce
// that the hosts changed, or end the job. The rules:
// - A generation is formed when every live worker has asked to join, or when the join window
//   has passed since the first pending join and at least --min-np have asked. Members of the
//   previous generation that did not ask by then are stuck (stopped, link cut): they are stopped
//   and their host blacklisted. Workers still starting are left to join a later generation.
//   A member its peers' heartbeats declared dead is stuck at once (declaredDead), without the window.
// - Ranks: the previous generation's members keep their order (rank 0 holds the committed
//   state), then new workers by host and slot; at most --max-np.
// - A worker that exits non-zero or by a signal blacklists its host (for a cooldown drawn from
//   --blacklist-cooldown-range, or for good) and its host's other workers are stopped.
// - A worker that exits 0 ends training: no more generations, waiting joiners are told so, and the
//   job ends with code 0 once every worker has exited.
// - A join from a worker outside the running generation announces "added"; a host gone from
//   discovery announces "removed" (members re-join at their next commit and are told `removed`).
// - Fewer than --min-np workers for longer than --elastic-timeout, or more resets than
//   --reset-limit, end the job with a message saying so. With every host (fixed, or as the
//   discovery script lists them) blacklisted for good, nothing can bring workers back: the job
//   ends at once. With cooldowns, it says in one line which host it waits for, and how long.
// - A worker starts with the rank variables of its planned place (Placement), as horovodrun's.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/hosts.h"

namespace hora::launcher {

struct ElasticLimits {
  int min_np = 1;
  int max_np = 1 << 20;
  int reset_limit = -1;  // -1: no limit
  std::chrono::milliseconds elastic_timeout{600000};
  std::chrono::milliseconds join_window{10000};
  // How long a failed host stays blacklisted, drawn in [min, max]; max 0: for good.
  std::chrono::milliseconds cooldown_min{0}, cooldown_max{0};
  // The hosts come from -H or a hostfile, not a discovery script: no host can be added later.
  bool fixed_hosts = false;
};

class ElasticPlanner {
 public:
  using Clock = std::chrono::steady_clock;
  using Time = Clock::time_point;

  // Where a worker stands in the job as planned when it is started: the rank variables horovodrun
  // gives it (HOROVOD_RANK, ...), which scripts read before or without hvd.init(). The ranks of
  // each generation are decided when it forms and may differ (docs/elastic.md).
  struct Placement {
    int rank = 0, size = 1, local_rank = 0, local_size = 1, cross_rank = 0, cross_size = 1;
  };
  struct Worker {
    std::string id;  // "host:slot"
    std::string host;
    int slot = 0;
    Placement started_as;
  };
  struct Decisions {
    std::vector<Worker> start;
    std::vector<std::string> stop;  // worker ids
    std::vector<std::pair<std::string, std::string>> answers;  // (worker id, nonce) -> below
    std::vector<std::string> answer_values;                    // "<generation> <rank> <size>" or "removed <why>"
    std::string hosts_updated;  // "added", "removed" or "mixed" when the members must re-join
    bool generation_formed = false;
    std::optional<int> end_code;  // the job ends with this code
    std::string end_reason;
    std::vector<std::string> notes;  // why hosts were blacklisted, for horarun's stderr
    // Failure reports to leave for members that will not leave their own (Note [failure reports]):
    // their peers wait for them, up to a grace, before they re-join.
    struct Report {
      int generation, rank;
      std::string text;
    };
    std::vector<Report> reports;
  };

  // `draw_cooldown(min, max)` picks a blacklisting's length (random in the driver, fixed in tests).
  ElasticPlanner(ElasticLimits limits,
                 std::function<std::chrono::milliseconds(std::chrono::milliseconds, std::chrono::milliseconds)>
                     draw_cooldown);

  // The usable hosts as discovery (or -H) gives them, in order.
  void hostsDiscovered(const std::vector<HostSlots>& hosts, Time now, Decisions& d);
  void joined(const std::string& id, const std::string& nonce, Time now, Decisions& d);
  // `failed`: exited non-zero or by a signal; `why` names it for messages.
  void exited(const std::string& id, bool failed, const std::string& why, Time now, Decisions& d);
  // A member's peers declared it dead (its heartbeat went silent: stopped, hung or cut off), by its
  // rank in the current generation: it is stuck, as one that misses the join window, but known
  // now; `why` is the verdict for the note. Ignored for a rank that has re-joined since.
  void declaredDead(int rank, const std::string& why, Time now, Decisions& d);
  void tick(Time now, Decisions& d);

  int generation() const { return generation_; }
  // The worker's rank in the current generation, or -1.
  int rankOf(const std::string& id) const;
  bool blacklisted(const std::string& host, Time now) const;
  size_t workerCount() const { return workers_.size(); }

 private:
  enum class State { kStarting, kMember, kJoined, kLeaving };
  struct Tracked {
    Worker worker;
    State state = State::kStarting;
    std::string nonce;  // of its pending join
    int rank = -1;      // in the current generation
  };

  void startWorkers(Time now, Decisions& d);
  // The places of the live workers if a generation formed now: members in rank order, then the
  // others by host and slot (formGeneration's order), at most --max-np.
  std::map<std::string, Placement> plannedPlacements(Time now) const;
  // The order of ranks in a generation: the previous one's members by rank, then the others by
  // host (in discovery order) and slot.
  bool ranksBefore(const Tracked& a, const Tracked& b) const;
  void formGeneration(Time now, Decisions& d);
  void leaveBehind(Tracked& t, const std::string& why, Time now, Decisions& d);
  // A member (rank >= 0) gets a failure report saying so.
  void stopWorker(Tracked& t, const std::string& why, Decisions& d);
  void answerRemoved(Tracked& t, const std::string& why, Decisions& d);
  void blacklist(const std::string& host, const std::string& why, Time now, Decisions& d);
  void announce(const std::string& kind, Decisions& d);
  void end(int code, const std::string& reason, Decisions& d);
  int liveCount() const;
  bool usable(const std::string& host, Time now) const;
  bool noHostCanReturn() const;
  // With fewer than --min-np workers and no host usable now: one note saying what the job waits for.
  void noteWaitForCooldown(Time now, Decisions& d);

  const ElasticLimits limits_;
  std::function<std::chrono::milliseconds(std::chrono::milliseconds, std::chrono::milliseconds)> draw_cooldown_;
  std::vector<HostSlots> hosts_;                // the last discovery
  std::map<std::string, Tracked> workers_;      // by id: every process that has not exited
  std::map<std::string, std::optional<Time>> blacklist_;  // host -> until (nullopt: for good)
  int generation_ = -1;
  int resets_ = 0;
  bool finished_ = false;  // a worker exited 0: training is over
  bool ended_ = false;
  std::optional<Time> first_pending_;  // of the joins not yet placed
  std::optional<Time> short_since_;    // fewer than --min-np workers since
  std::string announced_;              // the kind announced since the last generation
  bool waiting_noted_ = false;         // noteWaitForCooldown said it since workers last started
};

}  // namespace hora::launcher
