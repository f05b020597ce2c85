#include "engine/runtime.h"

#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>

#include "common/cpu_share.h"
#include "common/logging.h"
#include "engine/process_sets.h"
#include "hora/errors.h"

namespace hora {

namespace {

std::optional<Error> errorOf(std::exception_ptr e) {
  if (!e) return std::nullopt;
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return Error(err.kind(), err.what());
  } catch (const std::exception& err) {
    return Error(ErrorKind::kInternal, err.what());
  }
}

std::exception_ptr freshException(const std::optional<Error>& failure) {
  if (!failure) return nullptr;
  try {
    rethrowAs(*failure);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

void Handle::State::complete(std::exception_ptr e, std::vector<int64_t> shape) {
  std::function<void(std::exception_ptr)> cb;
  std::optional<Error> f = errorOf(e);
  {
    std::lock_guard lock(mutex);
    failure = f;
    output_shape = std::move(shape);
    cb = std::move(callback);
  }
  if (cb) cb(freshException(f));  // before `done`: a waiter sees the callback's effects
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  cv.notify_all();
}

bool Handle::poll() const {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->done) return true;
  }
  if (state_->doorbell) state_->doorbell->ringIfHeld();  // someone wants it now: Note [buckets]
  return false;
}

void Handle::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mutex);
  if (!state_->done) {
    if (state_->doorbell) state_->doorbell->ringIfHeld();
    // While this thread waits its core is free for hora's threads (Note [who may spin]).
    common::CpuShare::FrontendWait blocked;
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; }))
      throw TimeoutError("request did not complete within " + std::to_string(timeout.count()) + " ms");
  }
  if (state_->failure) rethrowAs(*state_->failure);
}

std::exception_ptr Handle::error() const {
  std::lock_guard lock(state_->mutex);
  return freshException(state_->failure);
}

std::vector<int64_t> Handle::outputShape() const {
  std::lock_guard lock(state_->mutex);
  return state_->output_shape;
}

namespace engine {

using Clock = PendingTable::Clock;

Doorbell::Doorbell() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!fd_.valid()) throw InternalError(std::string("eventfd failed: ") + std::strerror(errno));
}

void Doorbell::ring() {
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_.get(), &one, sizeof(one));
}

// Tensors of at least this size are not copied into the fusion buffer (see execute()).
constexpr size_t kFuseBelowBytes = 1 << 20;

// Note [engine cycle]: every cycle each rank (1) moves newly enqueued requests in, splitting
// them into those the response cache knows (Note [response cache]) and new ones; (2) joins one
// Min allreduce of a control vector: a byte per cache slot (1 = I submitted it), a byte that is
// 0 when I have new requests to announce, and a byte that is 0 when I am shutting down; (3) if
// anyone announces, allgathers the new requests and updates the replicated table (Note
// [replicated negotiation]); (4) executes the ready responses in the same order everywhere,
// fusing allreduces; (5) caches what the full negotiation decided. A rank starts a cycle when it
// has work worth one (Note [buckets]) and joins every cycle another rank starts (Note [idle
// engine]).

Runtime::Runtime(std::unique_ptr<Communicator> comm, const EngineOptions& options)
    : comm_(std::move(comm)), options_(options), rank_(comm_->rank()), size_(comm_->size()),
      table_(size_), cache_(options.cache_capacity), doorbell_(std::make_shared<Doorbell>()) {
  if (!options.timeline.empty())
    timeline_request_ = TimelineRequest{options.timeline, options.timeline_mark_cycles, options.timeline_all_ranks};
  applyTimelineRequest();  // before the thread starts: a bad path fails the constructor
  common::CpuShare::process().noteEngine(+1);  // Note [who may spin]
  thread_ = std::thread([this] { loop(); });
}

void Runtime::startTimeline(const std::string& path, bool mark_cycles, bool all_ranks) {
  {
    std::lock_guard lock(mutex_);
    timeline_request_ = TimelineRequest{path, mark_cycles, all_ranks};
  }
  wakeUp();
}

void Runtime::stopTimeline() {
  {
    std::lock_guard lock(mutex_);
    timeline_request_ = TimelineRequest{};
  }
  wakeUp();
}

void Runtime::applyTimelineRequest() {
  std::optional<TimelineRequest> request;
  {
    std::lock_guard lock(mutex_);
    request.swap(timeline_request_);
  }
  if (!request) return;
  timeline_.reset();  // closes the previous file
  if (request->path.empty() || (rank_ != 0 && !request->all_ranks)) return;
  timeline_ = std::make_unique<Timeline>(timelinePathFor(request->path, rank_, request->all_ranks), rank_,
                                         request->mark_cycles);
}

void Runtime::traceBegin(const std::string& name, std::string_view event, std::string_view args) {
  if (timeline_) timeline_->begin(name, event, args);
}

void Runtime::traceEnd(const std::string& name) {
  if (timeline_) timeline_->end(name);
}

namespace {
std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

Runtime::~Runtime() {
  shutdown();
  common::CpuShare::process().noteEngine(-1);
}

Handle failedHandle(std::exception_ptr e, std::function<void(std::exception_ptr)> done) {
  auto state = std::make_shared<Handle::State>();
  state->callback = std::move(done);
  state->complete(e);
  return Handle(state);
}

Handle Runtime::enqueue(Request request, std::function<void(std::exception_ptr)> done) {
  auto reject = [&](std::exception_ptr e) { return failedHandle(e, std::move(done)); };
  if (request.name.empty())
    return reject(std::make_exception_ptr(InvalidArgumentError("enqueue: the request has no name")));
  RequestMeta meta = RequestMeta::of(request);
  if (meta.elements() > 0 && request.input == nullptr)
    return reject(std::make_exception_ptr(InvalidArgumentError("enqueue '" + request.name + "': input is null")));
  const bool fixed_output = request.op == Collective::kAllreduce || request.op == Collective::kBroadcast;
  if (fixed_output && meta.elements() > 0 && request.output == nullptr)
    return reject(std::make_exception_ptr(InvalidArgumentError("enqueue '" + request.name + "': output is null")));
  const bool allocated_output = request.op == Collective::kAllgather || request.op == Collective::kAlltoall ||
                                request.op == Collective::kReducescatter;
  if (allocated_output && !request.allocate_output)
    return reject(std::make_exception_ptr(InvalidArgumentError("enqueue '" + request.name +
                                                               "': this collective needs allocate_output")));
  if (request.op == Collective::kJoin && request.output == nullptr)
    return reject(std::make_exception_ptr(InvalidArgumentError("join: the output for the last rank is null")));
  std::unique_lock lock(mutex_);
  if (fatal_) {
    auto e = fatal_;
    lock.unlock();
    return reject(e);
  }
  if (stopping_) {
    lock.unlock();
    return reject(std::make_exception_ptr(ShutdownError("enqueue '" + request.name + "': the engine has shut down")));
  }
  // Note [buckets]: an allreduce nobody waits for yet may wait for company.
  const bool may_hold = request.op == Collective::kAllreduce && !done && options_.bucket_bytes > 0;
  auto state = std::make_shared<Handle::State>();
  state->callback = std::move(done);
  state->doorbell = doorbell_;
  Handle handle(state);
  if (may_hold) held_bytes_ += static_cast<size_t>(meta.elements()) * dataTypeSize(meta.type);
  queue_.push_back({std::move(request), std::move(meta), state});
  const bool ring = !may_hold || held_bytes_ >= options_.bucket_bytes;
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

void Runtime::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wakeUp();
  if (thread_.joinable()) thread_.join();
}

void Runtime::loop() {
  pthread_setname_np(pthread_self(), "hora-engine");
  // Timed waits of this thread may overrun by the timer slack (50 us by default), which would
  // add to every idle cycle.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  try {
    // A cycle that ran something is followed at once by the next (every rank ran the same
    // responses, so all of them go on together): work flows without gaps. Otherwise wait for
    // work (Note [idle engine]); HORA_CYCLE_TIME=0 cycles continuously instead.
    while (true) {
      const CycleResult result = cycle();
      if (result == CycleResult::kStop) break;
      if (result == CycleResult::kWorked || options_.cycle_time.count() == 0) continue;
      waitUntilSomeRankHasWork();
    }
    failEverything(std::make_exception_ptr(ShutdownError("the engine has shut down")));
  } catch (const Error&) {
    failEverything(std::current_exception());
  }
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
// pending does not wake at all.
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
      std::lock_guard lock(mutex_);
      if ((!queue_.empty() && !doorbell_->held()) || stopping_ || timeline_request_) return;
    }
    if (!to_announce_.empty() || !dup_announce_.empty()) return;
    if (options_.stall_shutdown.count() > 0 && !table_.stalled(Clock::now(), options_.stall_shutdown).empty())
      return;
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
  const auto oldest = table_.oldest();
  if (!oldest) return kLongest;
  const auto now = Clock::now();
  auto due = now + kLongest;
  if (rank_ == 0 && options_.stall_check.count() > 0 && *oldest + options_.stall_check > now)
    due = std::min(due, *oldest + options_.stall_check);
  if (options_.stall_shutdown.count() > 0 && *oldest + options_.stall_shutdown > now)
    due = std::min(due, *oldest + options_.stall_shutdown);
  const auto floor = std::max(std::chrono::duration_cast<milliseconds>(options_.cycle_time), milliseconds(1));
  return std::max(std::chrono::duration_cast<milliseconds>(due - now) + milliseconds(1), floor);
}

void Runtime::admit(std::vector<Local> fresh) {
  for (auto& l : fresh) {
    const std::string name = l.meta.name;
    if (in_flight_.count(name)) {
      RequestMeta dup = l.meta;
      dup.duplicate = true;
      dup_announce_.push_back(std::move(dup));
      duplicates_.push_back(std::move(l));
      continue;
    }
    traceBegin(name, "NEGOTIATE_" + upper(toString(l.meta.op)));
    const int slot = cache_.find(name, rank_, l.meta);
    if (slot >= 0) cached_waiting_[slot] = name;
    else to_announce_.push_back(name);
    in_flight_.emplace(name, std::move(l));
  }
}

EngineStats Runtime::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Runtime::CycleResult Runtime::cycle() {
  const auto started = Clock::now();
  EngineStats delta;
  delta.cycles = 1;
  applyTimelineRequest();
  if (timeline_) timeline_->cycleStart();
  std::vector<Local> fresh;
  bool stopping;
  {
    std::lock_guard lock(mutex_);
    fresh.swap(queue_);
    held_bytes_ = 0;
    doorbell_->release();
    stopping = stopping_;
  }
  admit(std::move(fresh));

  // The cache is the same on every rank, so its high-water mark agrees too: bytes beyond it
  // would always be 0.
  const int slots = cache_.highWater();
  std::vector<uint8_t> control(static_cast<size_t>(slots) + 3, 0);
  for (const auto& [slot, name] : cached_waiting_) control[static_cast<size_t>(slot)] = 1;
  // A rank that joined stands in for every cached name (Note [join]).
  const std::vector<int> joined = table_.joined();
  if (table_.hasJoined(rank_)) std::fill_n(control.begin(), slots, uint8_t{1});
  control[static_cast<size_t>(slots)] = to_announce_.empty() && dup_announce_.empty() ? 1 : 0;
  control[static_cast<size_t>(slots) + 1] = stopping ? 0 : 1;
  // Stall shutdown is decided by the first rank whose clock passes the limit; the Min tells
  // everyone in the same cycle.
  const bool stall_limit = options_.stall_shutdown.count() > 0 &&
                           !table_.stalled(Clock::now(), options_.stall_shutdown).empty();
  control[static_cast<size_t>(slots) + 2] = stall_limit ? 0 : 1;
  comm_->allreduce(control.data(), control.data(), control.size(), DataType::kUInt8, {ReduceOp::kMin});

  if (control[static_cast<size_t>(slots) + 2] == 0) {
    // The table is the same everywhere, so every rank names the same tensors and ranks.
    std::string what;
    for (const auto& st : table_.stalled(Clock::now(), std::chrono::seconds(0))) {
      std::string missing;
      for (int m : st.missing) missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      what += "\n  tensor '" + st.name + "' is missing on ranks [" + missing + "]";
    }
    throw TimeoutError("stall shutdown: some tensors waited longer than HORA_STALL_SHUTDOWN_TIME_SECONDS=" +
                       std::to_string(options_.stall_shutdown.count()) + " s for other ranks" + what +
                       "\n  rank " + std::to_string(rank_) + "'s last operations: " + recentOperations());
  }
  std::vector<Response> ready;
  for (int slot = 0; slot < slots; ++slot) {
    if (!control[static_cast<size_t>(slot)]) continue;
    cache_.touch(slot);
    ready.push_back(cache_.at(slot));
    if (!joined.empty()) standIn(ready.back(), joined);
    ++delta.cached_responses;
    cached_waiting_.erase(slot);
  }
  std::vector<std::string> fully_negotiated;
  if (control[static_cast<size_t>(slots)] == 0) {
    ++delta.full_negotiations;
    negotiateInFull(ready, fully_negotiated);
  }
  delta.negotiation_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  {
    // Counted before execution completes any handle, so a caller that saw its request finish
    // also sees the negotiation that decided it.
    std::lock_guard lock(mutex_);
    stats_.cycles += delta.cycles;
    stats_.full_negotiations += delta.full_negotiations;
    stats_.cached_responses += delta.cached_responses;
    stats_.negotiation_seconds += delta.negotiation_seconds;
  }
  for (const auto& r : ready) {
    if (!in_flight_.count(r.name)) continue;
    traceEnd(r.name);  // NEGOTIATE
    if (r.error.empty()) traceBegin(r.name, "QUEUE");
  }
  const uint64_t fused = execute(ready);
  {
    std::lock_guard lock(mutex_);
    stats_.fused_allreduces += fused;
  }
  for (auto& r : ready) {
    // A response with stand-ins, or a join, is not what the next step will submit.
    if (!r.error.empty() || !r.joined.empty() || r.metas[0].op == Collective::kJoin ||
        std::find(fully_negotiated.begin(), fully_negotiated.end(), r.name) == fully_negotiated.end())
      continue;
    auto [slot, evicted] = cache_.insert(std::move(r));
    if (evicted >= 0) {
      if (auto it = cached_waiting_.find(evicted); it != cached_waiting_.end()) {
        to_announce_.push_back(it->second);
        cached_waiting_.erase(it);
      }
    }
  }
  warnStalls();
  if (control[static_cast<size_t>(slots) + 1] == 0) return CycleResult::kStop;
  // A full negotiation may have changed what the cache bytes mean (a rank joined, so it now
  // stands in for names the others submitted through the cache): cycle once more before
  // resting, since no rank may have new work to start the next cycle (Note [idle engine]).
  const bool negotiated = control[static_cast<size_t>(slots)] == 0;
  return ready.empty() && !negotiated ? CycleResult::kIdle : CycleResult::kWorked;
}

// Exchanges the requests not served by the cache and applies them to the replicated table;
// appends what became ready (and the names decided in full, for the cache) to the lists.
void Runtime::negotiateInFull(std::vector<Response>& ready, std::vector<std::string>& fully_negotiated) {
  std::vector<uint8_t> mine;
  std::set<std::string> announced;
  for (const auto& name : to_announce_) {
    // A name may have been queued twice (evicted from the cache, then announced) or have
    // finished meanwhile (failed by an error response): announce what is in flight, once.
    auto it = in_flight_.find(name);
    if (it != in_flight_.end() && announced.insert(name).second) encode(it->second.meta, mine);
  }
  for (const auto& m : dup_announce_) encode(m, mine);
  to_announce_.clear();
  dup_announce_.clear();
  const std::vector<size_t> one(static_cast<size_t>(size_), 1);
  std::vector<int64_t> lengths(static_cast<size_t>(size_));
  const int64_t my_length = static_cast<int64_t>(mine.size());
  comm_->allgather(&my_length, 1, lengths.data(), one, DataType::kInt64);
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  std::vector<uint8_t> all(std::accumulate(counts.begin(), counts.end(), size_t{0}) + 1);
  comm_->allgather(mine.data(), mine.size(), all.data(), counts, DataType::kUInt8);
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
        if (auto it = cached_waiting_.find(slot); it != cached_waiting_.end()) {
          to_announce_.push_back(it->second);
          cached_waiting_.erase(it);
        }
      }
      if (timeline_ && !m.duplicate) timeline_->mark(m.name, "rank " + std::to_string(r) + " ready");
      table_.add(r, std::move(m), now);
    }
  }
  for (auto& r : table_.takeReady()) {
    if (r.error.empty()) fully_negotiated.push_back(r.name);
    ready.push_back(std::move(r));
  }
}

uint64_t Runtime::execute(std::vector<Response>& ready) {
  uint64_t fused = 0;
  size_t i = 0;
  while (i < ready.size()) {
    const Response& r = ready[i];
    if (!r.error.empty()) {
      // Every request of that name fails, on every rank: the first submission and any duplicate.
      const auto e = std::make_exception_ptr(MismatchError(r.error));
      for (auto it = duplicates_.begin(); it != duplicates_.end();) {
        if (it->meta.name == r.name) {
          it->state->complete(e);
          it = duplicates_.erase(it);
        } else {
          ++it;
        }
      }
      finish(r.name, e);
      ++i;
      continue;
    }
    if (r.metas[0].op == Collective::kAllreduce) {
      // Fuse the run of small allreduces that agree on type, op and scales, up to the
      // threshold. A large tensor runs alone, in place: fusing it would cost two copies of its
      // bytes to save one collective's latency.
      std::vector<const Response*> group{&r};
      size_t bytes = static_cast<size_t>(r.metas[0].elements()) * dataTypeSize(r.metas[0].type);
      size_t j = i + 1;
      for (; j < ready.size() && bytes < kFuseBelowBytes; ++j) {
        const Response& n = ready[j];
        if (!n.error.empty() || n.metas[0].op != Collective::kAllreduce) break;
        const auto& a = r.metas[0];
        const auto& b = n.metas[0];
        if (a.type != b.type || a.reduce_op != b.reduce_op || a.prescale != b.prescale ||
            a.postscale != b.postscale || r.joined != n.joined)
          break;
        const size_t more = static_cast<size_t>(b.elements()) * dataTypeSize(b.type);
        if (more >= kFuseBelowBytes || bytes + more > options_.fusion_threshold) break;
        bytes += more;
        group.push_back(&n);
      }
      executeAllreduceGroup(group);
      fused += group.size() > 1 ? 1 : 0;
      i = j;
      continue;
    }
    executeOne(r);
    ++i;
  }
  return fused;
}

void Runtime::executeAllreduceGroup(const std::vector<const Response*>& group) {
  const Response& head = *group[0];
  const RequestMeta& first = head.metas[static_cast<size_t>(rank_)];
  AllreduceOptions o{first.reduce_op, first.prescale, first.postscale};
  if (!head.joined.empty() && o.op == ReduceOp::kAverage) {
    // The joined ranks' zeros are not data: average over the ranks that contributed.
    o.op = ReduceOp::kSum;
    o.postscale /= static_cast<double>(size_ - static_cast<int>(head.joined.size()));
  }
  const size_t elem = dataTypeSize(first.type);
  size_t total = 0;
  for (const Response* r : group) total += static_cast<size_t>(r->metas[static_cast<size_t>(rank_)].elements());
  std::string args;
  if (timeline_) {
    args = "{\"algorithm\":\"" + comm_->algorithmFor("allreduce", total * elem, o.op) +
           "\",\"bytes\":" + std::to_string(total * elem) + ",\"tensors\":" + std::to_string(group.size()) + "}";
    for (const Response* r : group) traceEnd(r->name);  // QUEUE
  }
  // This rank's request, or null where it joined and stands in with zeros.
  const auto mine = [&](const Response* r) -> Local* {
    auto it = in_flight_.find(r->name);
    return it == in_flight_.end() ? nullptr : &it->second;
  };
  if (group.size() == 1 && mine(&head)) {
    Local& l = *mine(&head);
    traceBegin(head.name, "ALLREDUCE", args);
    comm_->allreduce(l.request.input, l.request.output, total, first.type, o);
    traceEnd(head.name);
    finish(head.name, nullptr, l.meta.shape);
    return;
  }
  if (fusion_.size() < total * elem) fusion_.resize(total * elem);
  size_t offset = 0;
  for (const Response* r : group) {
    const size_t bytes = static_cast<size_t>(r->metas[static_cast<size_t>(rank_)].elements()) * elem;
    const Local* l = mine(r);
    traceBegin(r->name, "MEMCPY_IN_FUSION_BUFFER");
    if (bytes && l) std::memcpy(fusion_.data() + offset, l->request.input, bytes);
    else if (bytes) std::memset(fusion_.data() + offset, 0, bytes);
    traceEnd(r->name);
    offset += bytes;
  }
  for (const Response* r : group) traceBegin(r->name, "ALLREDUCE", args);
  comm_->allreduce(fusion_.data(), fusion_.data(), total, first.type, o);
  for (const Response* r : group) traceEnd(r->name);
  offset = 0;
  for (const Response* r : group) {
    const size_t bytes = static_cast<size_t>(r->metas[static_cast<size_t>(rank_)].elements()) * elem;
    Local* l = mine(r);
    if (l) {
      traceBegin(r->name, "MEMCPY_OUT_FUSION_BUFFER");
      if (bytes) std::memcpy(l->request.output, fusion_.data() + offset, bytes);
      traceEnd(r->name);
      finish(r->name, nullptr, l->meta.shape);
    }
    offset += bytes;
  }
}

void Runtime::executeOne(const Response& r) {
  auto found = in_flight_.find(r.name);
  if (found == in_flight_.end()) {
    // This rank joined: of the collectives that go on with joined ranks, only barrier is left.
    if (r.metas[0].op == Collective::kBarrier) comm_->barrier();
    return;
  }
  Local& mine = found->second;
  const RequestMeta& m = mine.meta;
  const size_t row = static_cast<size_t>(m.rowElements());
  const size_t elem = dataTypeSize(m.type);
  std::vector<int64_t> shape = m.shape;
  if (timeline_) {
    const size_t bytes = static_cast<size_t>(m.elements()) * elem;
    traceEnd(m.name);  // QUEUE
    traceBegin(m.name, upper(toString(m.op)),
               "{\"algorithm\":\"" + comm_->algorithmFor(toString(m.op), bytes) + "\",\"bytes\":" +
                   std::to_string(bytes) + "}");
  }
  switch (m.op) {
    case Collective::kAllreduce:
      break;  // executed by executeAllreduceGroup
    case Collective::kJoin:
      *static_cast<int32_t*>(mine.request.output) = r.last_joined;
      break;
    case Collective::kBarrier:
      comm_->barrier();
      break;
    case Collective::kBroadcast: {
      const size_t count = static_cast<size_t>(m.elements());
      if (mine.request.output != mine.request.input && count)
        std::memcpy(mine.request.output, mine.request.input, count * elem);
      comm_->broadcast(mine.request.output, count, m.type, m.root);
      break;
    }
    case Collective::kAllgather: {
      std::vector<size_t> counts(static_cast<size_t>(size_));
      int64_t rows = 0;
      for (int s = 0; s < size_; ++s) {
        counts[static_cast<size_t>(s)] = static_cast<size_t>(r.metas[static_cast<size_t>(s)].rows()) * row;
        rows += r.metas[static_cast<size_t>(s)].rows();
      }
      if (shape.empty()) shape = {size_};  // scalars gather into a vector
      else shape[0] = rows;
      void* out = mine.request.allocate_output(shape);
      comm_->allgather(mine.request.input, counts[static_cast<size_t>(rank_)], out, counts, m.type);
      break;
    }
    case Collective::kAlltoall: {
      auto splitsOf = [&](const RequestMeta& x) {
        std::vector<int64_t> s = x.splits;
        if (s.empty()) {
          for (int d = 0; d < size_; ++d) s.push_back(x.rows() / size_ + (d < x.rows() % size_ ? 1 : 0));
        }
        return s;
      };
      std::vector<size_t> send(static_cast<size_t>(size_)), recv(static_cast<size_t>(size_));
      const auto my_splits = splitsOf(m);
      int64_t rows = 0;
      for (int d = 0; d < size_; ++d) {
        send[static_cast<size_t>(d)] = static_cast<size_t>(my_splits[static_cast<size_t>(d)]) * row;
        const int64_t in = splitsOf(r.metas[static_cast<size_t>(d)])[static_cast<size_t>(rank_)];
        recv[static_cast<size_t>(d)] = static_cast<size_t>(in) * row;
        rows += in;
      }
      if (shape.empty()) shape = {rows};
      else shape[0] = rows;
      void* out = mine.request.allocate_output(shape);
      comm_->alltoall(mine.request.input, send, out, recv, m.type);
      break;
    }
    case Collective::kReducescatter: {
      std::vector<size_t> counts(static_cast<size_t>(size_));
      const int64_t rows = m.rows();
      for (int d = 0; d < size_; ++d)
        counts[static_cast<size_t>(d)] = static_cast<size_t>(rows / size_ + (d < rows % size_ ? 1 : 0)) * row;
      if (shape.empty()) shape = {1};
      else shape[0] = rows / size_ + (rank_ < rows % size_ ? 1 : 0);
      void* out = mine.request.allocate_output(shape);
      comm_->reducescatter(mine.request.input, out, counts, m.type, {m.reduce_op, m.prescale, m.postscale});
      break;
    }
  }
  traceEnd(m.name);
  finish(m.name, nullptr, shape);
}

void Runtime::finish(const std::string& name, std::exception_ptr error, std::vector<int64_t> shape) {
  auto it = in_flight_.find(name);
  if (it == in_flight_.end()) return;
  auto state = it->second.state;
  constexpr size_t kRecent = 8;
  std::string record = "#" + std::to_string(++completed_) + " " + std::string(toString(it->second.meta.op)) +
                       " '" + name + "'";
  record += error ? " failed" : " ok";
  recent_.push_back(std::move(record));
  if (recent_.size() > kRecent) recent_.pop_front();
  in_flight_.erase(it);
  for (auto c = cached_waiting_.begin(); c != cached_waiting_.end(); ++c) {
    if (c->second == name) {
      cached_waiting_.erase(c);
      break;
    }
  }
  state->complete(error, std::move(shape));
}

void Runtime::failEverything(std::exception_ptr error) {
  std::vector<Local> queued;
  {
    std::lock_guard lock(mutex_);
    if (!fatal_) fatal_ = error;  // later enqueues fail with the first cause
    stopping_ = true;
    queued.swap(queue_);
  }
  for (auto& l : queued) l.state->complete(error);
  for (auto& [name, l] : in_flight_) l.state->complete(error);
  in_flight_.clear();
  for (auto& l : duplicates_) l.state->complete(error);
  duplicates_.clear();
  cached_waiting_.clear();
}

std::string Runtime::recentOperations() const {
  std::string out;
  for (const auto& r : recent_) out += (out.empty() ? "" : ", ") + r;
  return out.empty() ? "none yet" : out;
}

void Runtime::warnStalls() {
  if (options_.stall_check.count() == 0 || rank_ != 0) return;
  const auto now = Clock::now();
  for (const auto& s : table_.stalled(now, options_.stall_check)) {
    auto& last = stall_warned_[s.name];
    if (now - last < options_.stall_check) continue;
    last = now;
    std::string missing;
    for (int r : s.missing) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    HORA_LOG(warn, "Stalled tensor '{}': submitted by some ranks {} s ago, still missing on ranks [{}]; "
             "rank {}'s last operations: {}", s.name, s.waited.count(), missing, rank_, recentOperations());
  }
}

}  // namespace engine

Engine::Engine(std::unique_ptr<Communicator> comm, const EngineOptions& options)
    : sets_(std::make_unique<engine::ProcessSets>(std::move(comm), options)) {}
Engine::~Engine() = default;
const Identity& Engine::identity() const { return sets_->world().identity(); }

Handle Engine::enqueue(Request request, std::function<void(std::exception_ptr)> done) {
  std::shared_ptr<engine::Runtime> runtime;
  try {
    runtime = sets_->runtimeOf(request.process_set);
  } catch (const Error&) {
    return engine::failedHandle(std::current_exception(), std::move(done));
  }
  return runtime->enqueue(std::move(request), std::move(done));
}

Handle Engine::join(int32_t* last_rank, int process_set) {
  Request r;
  r.name = "hora.join";
  r.op = Collective::kJoin;
  r.type = DataType::kInt32;
  r.shape = {0};
  r.output = last_rank;
  r.process_set = process_set;
  return enqueue(std::move(r));
}

Handle Engine::barrier(int process_set) {
  Request r;
  r.name = "hora.barrier";
  r.op = Collective::kBarrier;
  r.shape = {0};
  r.process_set = process_set;
  return enqueue(std::move(r));
}

int Engine::addProcessSet(std::vector<int> ranks) { return sets_->add(std::move(ranks)); }
void Engine::removeProcessSet(int id) { sets_->remove(id); }
std::vector<int> Engine::processSetRanks(int id) const { return sets_->ranksOf(id); }
std::vector<int> Engine::processSetIds() const { return sets_->ids(); }
void Engine::shutdown() { sets_->shutdown(); }
void Engine::startTimeline(const std::string& path, bool mark_cycles, bool all_ranks) {
  sets_->world().startTimeline(path, mark_cycles, all_ranks);
}
void Engine::stopTimeline() { sets_->world().stopTimeline(); }
EngineStats Engine::stats() const { return sets_->world().stats(); }
void Engine::setComputeThreads(int threads) { common::CpuShare::process().setComputeThreads(threads); }

}  // namespace hora
