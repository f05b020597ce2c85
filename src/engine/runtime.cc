#include "engine/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/cpu_share.h"
#include "common/logging.h"
#include "engine/departure.h"
#include "engine/fusion.h"
#include "hora/errors.h"

namespace hora::engine {

using Clock = PendingTable::Clock;

// Note [engine cycle]: every cycle each rank (1) moves newly enqueued requests in, splitting
// them into those the response cache knows (Note [response cache]) and new ones; (2) joins one
// Min allreduce of a control vector (control_vector.h): a byte per cache slot (1 = I submitted
// it), a byte that is 0 when I have new requests to announce, a byte that is 0 when I am
// shutting down and one that is 0 when my clock passed the stall-shutdown limit; (3) if anyone
// announces, allgathers the new requests and updates the replicated table (Note [replicated
// negotiation]); (4) executes the ready responses in the same order everywhere, fusing
// allreduces (fusion.h); (5) caches what the full negotiation decided. A rank starts a cycle
// when it has work worth one (Note [buckets]) and joins every cycle another rank starts (Note
// [idle engine]). The Negotiator (negotiator.h) does (1), (3) and (5), the Executor
// (executor.h) does (4).

Runtime::Runtime(std::unique_ptr<Communicator> comm, const EngineOptions& options)
    : comm_(std::move(comm)), options_(options), rank_(comm_->rank()), size_(comm_->size()),
      negotiator_(*comm_, tracer_, options.cache_capacity),
      executor_(*comm_, tracer_, [this](const std::string& name) { return negotiator_.inFlight(name); },
                [this](const std::string& name, std::vector<int64_t> shape) {
                  finish(name, nullptr, std::move(shape));
                }),
      doorbell_(std::make_shared<Doorbell>()) {
  bucket_bytes_ = options.bucket_bytes;
  const Communicator::PlanTuning plan = comm_->planTuning();
  tuned_ = {options.fusion_threshold, options.cycle_time, options.cache_capacity > 0, plan.ring_threshold_bytes,
            options.bucket_bytes, plan.hierarchical_allreduce, plan.hierarchical_allgather};
  if (options.autotune.enabled)
    tuner_ = std::make_unique<ParameterManager>(
        options.autotune, tuned_, plan.shared_memory ? "HORA_SHM_RING_THRESHOLD" : "HORA_RING_THRESHOLD",
        plan.hierarchy_possible, rank_ == 0);
  if (!options.timeline.empty())
    timeline_request_ = TimelineRequest{options.timeline, options.timeline_mark_cycles, options.timeline_all_ranks};
  applyTimelineRequest();  // before the thread starts: a bad path fails the constructor
  common::CpuShare::process().noteEngine(+1);  // Note [who may spin]
  thread_ = std::thread([this] { loop(); });
}

Runtime::~Runtime() {
  shutdown();
  common::CpuShare::process().noteEngine(-1);
}

void Runtime::startTimeline(const std::string& path, bool mark_cycles, bool all_ranks) {
  {
    common::MutexLock lock(mutex_);
    timeline_request_ = TimelineRequest{path, mark_cycles, all_ranks};
  }
  wakeUp();
}

void Runtime::stopTimeline() {
  {
    common::MutexLock lock(mutex_);
    timeline_request_ = TimelineRequest{};
  }
  wakeUp();
}

void Runtime::applyTimelineRequest() {
  std::optional<TimelineRequest> request;
  {
    common::MutexLock lock(mutex_);
    request.swap(timeline_request_);
  }
  if (!request) return;
  tracer_.close();  // closes the previous file
  if (request->path.empty() || (rank_ != 0 && !request->all_ranks)) return;
  tracer_.open(std::make_unique<Timeline>(timelinePathFor(request->path, rank_, request->all_ranks), rank_,
                                          request->mark_cycles));
}

namespace {

// Why a request cannot be enqueued as it is; empty when it can.
// The element type, and for the reductions the Communicator's own checks (op, scale factors,
// Adasum's power of two), made on every rank of the set alike before anything is negotiated.
std::string invalidElements(const Request& request, int ranks) {
  const int type = static_cast<int>(request.type);
  if (type < 0 || type >= kNumDataTypes) return "unknown data type " + std::to_string(type);
  const bool reduces = request.op == CollectiveKind::kAllreduce || request.op == CollectiveKind::kReducescatter;
  return reduces ? Communicator::whyRefused(request.op, request.type, request.reduce, ranks) : std::string();
}

std::string invalidRequest(const Request& request, const RequestMeta& meta, int ranks) {
  if (request.name.empty()) return "enqueue: the request has no name";
  if (std::string why = invalidElements(request, ranks); !why.empty()) return "enqueue '" + request.name + "': " + why;
  if (meta.elements() > 0 && request.input == nullptr) return "enqueue '" + request.name + "': input is null";
  const bool fixed_output = request.op == CollectiveKind::kAllreduce || request.op == CollectiveKind::kBroadcast;
  if (fixed_output && meta.elements() > 0 && request.output == nullptr)
    return "enqueue '" + request.name + "': output is null";
  const bool allocated_output = request.op == CollectiveKind::kAllgather || request.op == CollectiveKind::kAlltoall ||
                                request.op == CollectiveKind::kReducescatter;
  if (allocated_output && !request.allocate_output)
    return "enqueue '" + request.name + "': this collective needs allocate_output";
  if (request.op == CollectiveKind::kJoin && request.output == nullptr)
    return "join: the output for the last rank is null";
  return {};
}

}  // namespace

Handle Runtime::enqueue(Request request, std::function<void(std::exception_ptr)> done) {
  auto reject = [&](std::exception_ptr e) { return failedHandle(e, std::move(done)); };
  RequestMeta meta = RequestMeta::of(request);
  if (std::string why = invalidRequest(request, meta, size_); !why.empty())
    return reject(std::make_exception_ptr(InvalidArgumentError(why)));
  common::MutexLock lock(mutex_);
  if (fatal_) {
    auto e = fatal_;
    lock.unlock();
    return reject(e);
  }
  if (stopping_) {
    const std::string why = stop_reason_;
    lock.unlock();
    return reject(std::make_exception_ptr(
        ShutdownError("enqueue '" + request.name + "': hora is shutting down on this rank (it " + why + ")")));
  }
  if (!names_in_flight_.insert(request.name).second) {
    lock.unlock();
    return reject(std::make_exception_ptr(InvalidArgumentError(
        "Tensor '" + request.name + "' is already in flight on this rank: a name may be submitted again only "
        "after its previous submission completed; give concurrent operations different names")));
  }
  // An allreduce nobody waits for yet may wait for company (Note [buckets]).
  const bool may_hold = request.op == CollectiveKind::kAllreduce && !done && bucket_bytes_ > 0;
  auto state = std::make_shared<Handle::State>();
  state->callback = std::move(done);
  state->doorbell = doorbell_;
  Handle handle(state);
  if (may_hold) held_bytes_ += static_cast<size_t>(meta.elements()) * dataTypeSize(meta.type);
  queue_.push_back({std::move(request), std::move(meta), state});
  const bool ring = !may_hold || held_bytes_ >= bucket_bytes_;
  if (ring) {
    held_bytes_ = 0;
    doorbell_->release();
  } else {
    doorbell_->hold();
  }
  lock.unlock();
  if (ring) wakeUp();
  return handle;
}

void Runtime::shutdown(const std::string& why) {
  {
    common::MutexLock lock(mutex_);
    if (!stopping_ && stop_reason_.empty()) stop_reason_ = why.empty() ? "shut down its engine" : why;
    stopping_ = true;
  }
  wakeUp();
  if (thread_.joinable()) thread_.join();
}

EngineStats Runtime::stats() const {
  common::MutexLock lock(mutex_);
  return stats_;
}

// HORA_THREAD_AFFINITY, as Horovod's HOROVOD_THREAD_AFFINITY: local rank i's engine thread on
// the i-th core listed; a list shorter than the host's ranks pins nobody.
void Runtime::pinThread() {
  const auto& cores = options_.thread_affinity;
  if (cores.empty()) return;
  const Identity& me = comm_->identity();
  if (static_cast<int>(cores.size()) < me.local_size) {
    HORA_LOG(warn, "HORA_THREAD_AFFINITY lists {} core(s) for {} local ranks: the engine thread is not pinned",
             cores.size(), me.local_size);
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cores[static_cast<size_t>(me.local_rank)], &set);
  if (const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); err != 0)
    HORA_LOG(warn, "HORA_THREAD_AFFINITY: cannot pin the engine thread to core {}: {}",
             cores[static_cast<size_t>(me.local_rank)], std::strerror(err));
  else
    HORA_LOG(info, "engine thread pinned to core {}", cores[static_cast<size_t>(me.local_rank)]);
}

void Runtime::loop() {
  pthread_setname_np(pthread_self(), "hora-engine");
  pinThread();
  // Timed waits of this thread may overrun by the timer slack (50 us by default), which would
  // add to every idle cycle.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  try {
    // Every rank's engine thread opens the board before its first cycle (it is collective).
    if (options_.submission_board) negotiator_.useBoard(SubmissionBoard::open(*comm_, options_.cache_capacity));
    // A cycle that ran something is followed at once by the next (every rank ran the same
    // responses, so all of them go on together): work flows without gaps. Otherwise wait for
    // work (Note [idle engine]); HORA_CYCLE_TIME=0 cycles continuously instead. With a board,
    // a cycle that ran only cached names is not followed by another: the board says when the
    // next has work (Note [submission board]).
    while (true) {
      const CycleResult result = cycle();
      if (result == CycleResult::kStop) break;
      if (!followAtOnce(result)) waitUntilSomeRankHasWork();
    }
    failEverything(std::make_exception_ptr(ShutdownError(departures_)));
  } catch (const Error&) {
    failEverything(std::current_exception());
  }
}

bool Runtime::followAtOnce(CycleResult result) const {
  if (tuned_.cycle_time.count() == 0) return true;
  if (result == CycleResult::kNegotiated) return true;
  return result == CycleResult::kWorked && !negotiator_.hasBoard();
}

// Note [idle engine]: an engine with nothing to negotiate does not cycle. Cycling anyway (every
// HORA_CYCLE_TIME, as Horovod does) costs a network round trip and a wake-up per millisecond on
// every rank, CPU that a training job on the same cores would rather use. Instead the engine
// thread sleeps in poll() on its peers' sockets and an eventfd (the Doorbell): a request of this
// rank (or a shutdown, or a timeline switch) rings it; a request of another rank makes that rank
// cycle, and the first bytes of its control allreduce arrive here, so this rank joins the cycle.
// Since every rank runs the same cycles, a rank that received bytes knows a cycle began. Names
// this rank submitted but others have not need no cycle of ours: the others' submission starts
// one. The sleep ends early only for housekeeping that needs no peers: rank 0's stall warnings
// and the stall-shutdown limit, due at known times (idleTimeout), so an engine with nothing
// pending does not wake at all. On one host a rank's request for a cached name starts a cycle only
// when it completes the name (Note [submission board]); elsewhere every request does.
//
// Note [buckets]: gradients reach the engine one by one during the backward pass, a few
// milliseconds apart. A cycle for each (as Horovod's engine does every HORA_CYCLE_TIME) wakes
// every rank's engine thread twice per gradient, and mostly finds that the other ranks do not
// have it yet. So an allreduce that nobody waits for is only queued (Doorbell::hold) until
// HORA_BUCKET_BYTES of them are queued, or a request of another kind comes, or a thread waits
// for or polls any handle of this engine (that rings the doorbell), or another rank starts a
// cycle (which takes everything queued). Gradients thus go in buckets, as in PyTorch DDP, but
// the buckets need not be declared and no order is assumed: a rank that started a cycle with a
// bucket the others have only in part runs what every rank has, and the rest follows with the
// next bucket. A cycle after one that ran something also takes what queued meanwhile.
void Runtime::waitUntilSomeRankHasWork() {
  while (true) {
    {
      common::MutexLock lock(mutex_);
      if (stopping_ || timeline_request_) return;
      if (!queue_.empty() && !doorbell_->held() && !negotiator_.hasBoard()) return;
    }
    // With a board, this rank's requests start a cycle only if one of them completes a name
    // (Note [submission board]); admitting them posts them there.
    if (negotiator_.hasBoard() && admitQueued()) return;
    if (negotiator_.hasAnnouncements() || negotiator_.someCachedNameIsComplete()) return;
    if (stallLimitPassed()) return;
    if (comm_->waitForIncoming(idleTimeout(), doorbell_->fd())) {
      uint64_t count;
      // Our doorbell: look again at what rang it. Otherwise a peer began a cycle: join it.
      if (::read(doorbell_->fd(), &count, sizeof(count)) == sizeof(count)) continue;
      return;
    }
    warnStalls();
  }
}

std::chrono::milliseconds Runtime::idleTimeout() const {
  using std::chrono::milliseconds;
  constexpr milliseconds kLongest{1000};  // a bound, in case a clock jumps
  const auto oldest = negotiator_.table().oldest();
  if (!oldest) return kLongest;
  const auto now = Clock::now();
  auto due = now + kLongest;
  if (rank_ == 0 && options_.stall_check.count() > 0 && *oldest + options_.stall_check > now)
    due = std::min(due, *oldest + options_.stall_check);
  if (options_.stall_shutdown.count() > 0 && *oldest + options_.stall_shutdown > now)
    due = std::min(due, *oldest + options_.stall_shutdown);
  const auto floor = std::max(std::chrono::duration_cast<milliseconds>(tuned_.cycle_time), milliseconds(1));
  return std::max(std::chrono::duration_cast<milliseconds>(due - now) + milliseconds(1), floor);
}

Runtime::CycleResult Runtime::cycle() {
  const auto started = Clock::now();
  applyTimelineRequest();
  tracer_.cycleStart();
  ControlVector control = controlVector(admitQueued());
  control.agree(*comm_);
  ++cycles_run_;
  if (control.someRankPassedStallLimit()) throwStallShutdown();
  if (control.someRankRetunes()) applyTuning();
  EngineStats delta;
  delta.cycles = 1;
  std::vector<Response> ready = negotiator_.takeCached(control);
  delta.cached_responses = ready.size();
  std::vector<std::string> fully_negotiated;
  if (control.someRankAnnounces()) {
    ++delta.full_negotiations;
    negotiator_.negotiateInFull(ready, fully_negotiated);
  }
  delta.negotiation_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  // Counted before execution completes any handle, so a caller that saw its request finish
  // also sees the negotiation that decided it.
  addStats(delta);
  // Barriers run after everything decided with them (the same order on every rank: the list is
  // replicated), so a thread that returns from a barrier finds that cycle's other requests
  // completed and their names free for the next submission.
  std::stable_partition(ready.begin(), ready.end(), [](const Response& r) {
    return r.metas.empty() || r.metas[0].op != CollectiveKind::kBarrier;
  });
  const uint64_t fused = execute(ready);
  {
    common::MutexLock lock(mutex_);
    stats_.fused_allreduces += fused;
  }
  const bool ran = !ready.empty();
  if (tuner_ && rank_ == 0) recordForTuning(ready);
  negotiator_.remember(ready, fully_negotiated);
  warnStalls();
  if (control.someRankStops()) {
    std::string mine;
    {
      common::MutexLock lock(mutex_);
      if (stopping_) mine = stop_reason_;
    }
    departures_ = agreeOnDepartures(*comm_, mine);  // every rank is in this cycle (Note [departures])
    return CycleResult::kStop;
  }
  // A full negotiation may have changed what the cache bytes mean (a rank joined, so it now
  // stands in for names the others submitted through the cache): cycle once more before
  // resting, since no rank may have new work to start the next cycle (Note [idle engine]).
  if (control.someRankAnnounces()) return CycleResult::kNegotiated;
  return ran ? CycleResult::kWorked : CycleResult::kIdle;
}

bool Runtime::admitQueued() {
  std::vector<Submission> fresh;
  bool stopping;
  {
    common::MutexLock lock(mutex_);
    fresh.swap(queue_);
    held_bytes_ = 0;
    doorbell_->release();
    stopping = stopping_;
  }
  negotiator_.admit(std::move(fresh));
  return stopping;
}

ControlVector Runtime::controlVector(bool stopping) const {
  ControlVector control = negotiator_.controlVector();
  if (stopping) control.markStopping();
  if (tuner_ && tuner_->hasProposal()) control.markRetuning();
  // Stall shutdown is decided by the first rank whose clock passes the limit; the Min tells
  // everyone in the same cycle.
  if (stallLimitPassed()) control.markStallLimitPassed();
  return control;
}

std::vector<TuningRecord> Runtime::tuningHistory() const {
  common::MutexLock lock(mutex_);
  return tuning_history_;
}

// Every rank is in this cycle (the control allreduce said rank 0 retunes), so
// every rank joins the broadcast and applies the same parameters before anything of this cycle
// runs. A rank without HORA_AUTOTUNE still follows rank 0 (Note [autotuning]).
void Runtime::applyTuning() {
  ParameterManager::Wire wire{};
  if (tuner_ && rank_ == 0) wire = tuner_->proposal();
  comm_->broadcast(wire.data(), wire.size(), DataType::kFloat64, 0);
  bool final = false;
  const TunedParameters p = ParameterManager::decode(wire, &final);
  if (tuner_) tuner_->apply(wire, Clock::now());
  tuned_ = p;
  negotiator_.setCacheEnabled(p.cache_enabled);
  Communicator::PlanTuning plan = comm_->planTuning();
  plan.ring_threshold_bytes = p.ring_threshold;
  plan.hierarchical_allreduce = p.hierarchical_allreduce;
  plan.hierarchical_allgather = p.hierarchical_allgather;
  comm_->setPlanTuning(plan);
  common::MutexLock lock(mutex_);
  bucket_bytes_ = p.bucket_bytes;
  tuning_history_.push_back({cycles_run_, p, final});
}

void Runtime::recordForTuning(const std::vector<Response>& ran) {
  std::vector<std::pair<std::string, size_t>> allreduced;
  for (const auto& r : ran) {
    if (!r.error.empty() || r.metas.empty() || r.metas[0].op != CollectiveKind::kAllreduce) continue;
    allreduced.emplace_back(r.name, static_cast<size_t>(r.metas[0].elements()) * dataTypeSize(r.metas[0].type));
  }
  tuner_->record(allreduced, Clock::now());
}

void Runtime::addStats(const EngineStats& delta) {
  common::MutexLock lock(mutex_);
  stats_.cycles += delta.cycles;
  stats_.full_negotiations += delta.full_negotiations;
  stats_.cached_responses += delta.cached_responses;
  stats_.negotiation_seconds += delta.negotiation_seconds;
}

uint64_t Runtime::execute(const std::vector<Response>& ready) {
  for (const auto& r : ready) {
    if (!negotiator_.inFlight(r.name)) continue;
    tracer_.end(r.name);  // NEGOTIATE
    if (r.error.empty()) tracer_.begin(r.name, "QUEUE");
  }
  uint64_t fused = 0;
  for (const FusionGroup& g : fusionGroups(ready, tuned_.fusion_threshold)) {
    const Response& head = ready[g.first];
    if (!head.error.empty()) {
      // The request of that name fails, on every rank.
      finish(head.name, std::make_exception_ptr(MismatchError(head.error)));
    } else if (head.metas[0].op == CollectiveKind::kAllreduce) {
      executor_.allreduce(std::span(ready).subspan(g.first, g.count));
      fused += g.count > 1 ? 1 : 0;
    } else {
      executor_.run(head);
    }
  }
  return fused;
}

void Runtime::finish(const std::string& name, std::exception_ptr error, std::vector<int64_t> shape) {
  std::optional<Submission> done = negotiator_.release(name);
  if (!done) return;
  {
    // Before completing: a thread that saw its request finish may submit the name again at once.
    common::MutexLock lock(mutex_);
    names_in_flight_.erase(name);
  }
  constexpr size_t kRecent = 8;
  std::string record = "#" + std::to_string(++completed_) + " " + std::string(toString(done->meta.op)) +
                       " '" + name + "'";
  record += error ? " failed" : " ok";
  recent_.push_back(std::move(record));
  if (recent_.size() > kRecent) recent_.pop_front();
  done->state->complete(error, std::move(shape));
}

void Runtime::failEverything(std::exception_ptr error) {
  std::vector<Submission> queued;
  {
    common::MutexLock lock(mutex_);
    if (!fatal_) fatal_ = error;  // later enqueues fail with the first cause
    stopping_ = true;
    queued.swap(queue_);
    names_in_flight_.clear();
  }
  for (auto& l : queued) l.state->complete(error);
  negotiator_.failAll(error);
}

std::string Runtime::recentOperations() const {
  std::string out;
  for (const auto& r : recent_) out += (out.empty() ? "" : ", ") + r;
  return out.empty() ? "none yet" : out;
}

namespace {
std::string joined(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
}  // namespace

bool Runtime::stallLimitPassed() const {
  return options_.stall_shutdown.count() > 0 &&
         !negotiator_.table().stalled(Clock::now(), options_.stall_shutdown).empty();
}

void Runtime::throwStallShutdown() const {
  // The table is the same everywhere, so every rank names the same tensors and ranks.
  std::string what;
  for (const auto& st : negotiator_.table().stalled(Clock::now(), std::chrono::seconds(0)))
    what += "\n  tensor '" + st.name + "' is missing on ranks [" + joined(st.missing) + "]";
  throw TimeoutError("stall shutdown: some tensors waited longer than HORA_STALL_SHUTDOWN_TIME_SECONDS=" +
                     std::to_string(options_.stall_shutdown.count()) + " s for other ranks" + what +
                     "\n  rank " + std::to_string(rank_) + "'s last operations: " + recentOperations());
}

void Runtime::warnStalls() {
  if (options_.stall_check.count() == 0 || rank_ != 0) return;
  const auto now = Clock::now();
  for (const auto& s : negotiator_.table().stalled(now, options_.stall_check)) {
    auto& last = stall_warned_[s.name];
    if (now - last < options_.stall_check) continue;
    last = now;
    HORA_LOG(warn, "Stalled tensor '{}': submitted by some ranks {} s ago, still missing on ranks [{}]; "
             "rank {}'s last operations: {}", s.name, s.waited.count(), joined(s.missing), rank_, recentOperations());
  }
}

}  // namespace hora::engine
