#include "engine/autotune/parameter_manager.h"

#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "hora/errors.h"

namespace hora::engine {

namespace {

// The search box of each knob. Sizes vary over orders of magnitude, so they are searched on a
// log2 scale: 64 KiB to 128 MiB of fusion buffer (the default is the top), 1 KiB to 16 MiB of
// ring threshold, 16 KiB to 64 MiB of bucket. The cycle time only bounds an idle engine's sleep
// and 0 makes it cycle without rest (Note [idle engine]): 0 to 10 ms.
struct LogRange {
  double lo, hi;  // log2 of bytes
  double toUnit(size_t bytes) const {
    if (bytes == 0) return 0.0;
    return std::clamp((std::log2(static_cast<double>(bytes)) - lo) / (hi - lo), 0.0, 1.0);
  }
  size_t fromUnit(double x) const { return static_cast<size_t>(std::llround(std::exp2(lo + x * (hi - lo)))); }
};
// The ring threshold stays at 4 KiB or more: the engine's control allreduce (a byte per cache
// slot, about 1 KiB) must stay below it, or across hosts the planner's `auto` would send it
// through the hierarchy, whose connections an idle engine does not watch (Note [idle engine]).
constexpr LogRange kFusionRange{16, 27}, kRingRange{12, 24}, kBucketRange{14, 26};
constexpr double kMaxCycleMs = 10;
// Scored samples that are random before the model takes over (including the starting point).
constexpr size_t kRandomStart = 3;

// The hierarchical choices on [0, 1]: never below 0.5, auto above. Not `always`: it would route
// the engine's small control allreduce through the hierarchy too, which an idle engine cannot
// hear (Note [idle engine]); `auto` uses the hierarchy for every message above the ring
// threshold, which the search moves as well.
double choiceToUnit(HierarchyChoice c) { return c == HierarchyChoice::kNever ? 0.25 : 0.75; }
HierarchyChoice choiceFromUnit(double x) { return x < 0.5 ? HierarchyChoice::kNever : HierarchyChoice::kAuto; }
const char* choiceText(HierarchyChoice c) {
  return c == HierarchyChoice::kNever ? "0" : c == HierarchyChoice::kAuto ? "auto" : "1";
}

}  // namespace

ParameterManager::ParameterManager(const AutotuneOptions& options, const TunedParameters& initial,
                                   const std::string& ring_knob, bool hierarchy_possible, bool coordinator)
    : options_(options), initial_(initial), coordinator_(coordinator), current_(initial),
      warmup_left_(options.warmup_samples) {
  const auto fixed = [&](const std::string& name) {
    return std::find(options.fixed.begin(), options.fixed.end(), name) != options.fixed.end();
  };
  const std::pair<Knob, std::string> all[] = {
      {Knob::kFusion, "HORA_FUSION_THRESHOLD"},         {Knob::kCycle, "HORA_CYCLE_TIME"},
      {Knob::kCache, "HORA_CACHE_CAPACITY"},            {Knob::kRing, ring_knob},
      {Knob::kBucket, "HORA_BUCKET_BYTES"},             {Knob::kHierAllreduce, "HORA_HIERARCHICAL_ALLREDUCE"},
      {Knob::kHierAllgather, "HORA_HIERARCHICAL_ALLGATHER"}};
  std::string kept;
  for (const auto& [knob, name] : all) {
    const bool hierarchical = knob == Knob::kHierAllreduce || knob == Knob::kHierAllgather;
    // A cache of capacity 0 cannot be switched on.
    if (fixed(name) || (hierarchical && !hierarchy_possible) || (knob == Knob::kCache && !initial.cache_enabled)) {
      kept += (kept.empty() ? "" : ", ") + name;
      continue;
    }
    dims_.push_back({knob, name});
    names_.push_back(name);
  }
  if (!dims_.empty())
    optimizer_.emplace(static_cast<int>(dims_.size()), options.noise, /*seed=*/20181, kRandomStart);
  if (!coordinator_) return;
  std::string tuned;
  for (const auto& n : names_) tuned += (tuned.empty() ? "" : ", ") + n;
  HORA_LOG(info, "autotune: tuning [{}]; left as they are: [{}]{}", tuned, kept,
           hierarchy_possible ? "" : " (the hierarchical choices need several hosts with the same number of ranks)");
  if (!options.log.empty()) {
    log_.open(options.log, std::ios::out | std::ios::trunc);
    if (!log_) throw InvalidArgumentError("HORA_AUTOTUNE_LOG=" + options.log + ": cannot open the file for writing");
    log_ << "hierarchical_allreduce,hierarchical_allgather,cache_enabled,cycle_time_ms,tensor_fusion_threshold,"
            "ring_threshold,bucket_bytes,score\n";
    log_.flush();
  }
}

std::vector<double> ParameterManager::toUnit(const TunedParameters& p) const {
  std::vector<double> x;
  for (const auto& d : dims_) {
    switch (d.knob) {
      case Knob::kFusion: x.push_back(kFusionRange.toUnit(p.fusion_threshold)); break;
      case Knob::kCycle:
        x.push_back(std::clamp(std::chrono::duration<double, std::milli>(p.cycle_time).count() / kMaxCycleMs, 0.0, 1.0));
        break;
      case Knob::kCache: x.push_back(p.cache_enabled ? 0.75 : 0.25); break;
      case Knob::kRing: x.push_back(kRingRange.toUnit(p.ring_threshold)); break;
      case Knob::kBucket: x.push_back(kBucketRange.toUnit(p.bucket_bytes)); break;
      case Knob::kHierAllreduce: x.push_back(choiceToUnit(p.hierarchical_allreduce)); break;
      case Knob::kHierAllgather: x.push_back(choiceToUnit(p.hierarchical_allgather)); break;
    }
  }
  return x;
}

TunedParameters ParameterManager::fromUnit(const std::vector<double>& x) const {
  TunedParameters p = initial_;
  for (size_t i = 0; i < dims_.size(); ++i) {
    const double v = std::clamp(x[i], 0.0, 1.0);
    switch (dims_[i].knob) {
      case Knob::kFusion: p.fusion_threshold = kFusionRange.fromUnit(v); break;
      case Knob::kCycle:
        // Whole tens of microseconds; the bottom percent of the range is 0 (no rest at all).
        p.cycle_time = std::chrono::microseconds(v < 0.01 ? 0 : std::llround(v * kMaxCycleMs * 100) * 10);
        break;
      case Knob::kCache: p.cache_enabled = v >= 0.5; break;
      case Knob::kRing: p.ring_threshold = kRingRange.fromUnit(v); break;
      case Knob::kBucket: p.bucket_bytes = kBucketRange.fromUnit(v); break;
      case Knob::kHierAllreduce: p.hierarchical_allreduce = choiceFromUnit(v); break;
      case Knob::kHierAllgather: p.hierarchical_allgather = choiceFromUnit(v); break;
    }
  }
  return p;
}

bool ParameterManager::record(const std::vector<std::pair<std::string, size_t>>& allreduced, Clock::time_point now) {
  if (!coordinator_ || done_ || !window_open_ || !optimizer_) return false;
  if (!started_) {
    // The first window starts with the first cycle that ran something (a warm-up window).
    started_ = true;
    window_start_ = last_record_ = now;
  }
  for (const auto& [name, bytes] : allreduced) {
    // A name seen a (steps + 1)-th time begins the step after the window: the window ends where
    // the previous cycle ended, and this cycle opens the next one.
    if (++runs_[name] > options_.steps_per_sample) {
      const double micros = std::chrono::duration<double, std::micro>(last_record_ - window_start_).count();
      endWindow(micros > 0 ? static_cast<double>(window_bytes_) / micros : 0.0);
      if (!window_open_) return true;  // a proposal: the next window starts when it is applied
      window_start_ = last_record_;
      window_bytes_ = 0;
      runs_.clear();
      for (const auto& [n, b] : allreduced) {
        ++runs_[n];
        window_bytes_ += b;
      }
      last_record_ = now;
      return false;
    }
  }
  for (const auto& [name, bytes] : allreduced) window_bytes_ += bytes;
  last_record_ = now;
  return false;
}

void ParameterManager::endWindow(double score) {
  if (warmup_left_ > 0) {
    --warmup_left_;
    HORA_LOG(info, "autotune: warming up ({} samples to go), {:.1f} bytes/us", warmup_left_, score);
    return;
  }
  optimizer_->add(toUnit(current_), score);
  sampled_.push_back(current_);
  log(current_, score, "sample");
  TunedParameters next;
  bool final = false;
  if (static_cast<int>(optimizer_->samples()) >= options_.max_samples) {
    // The sample the model rates best, unless its own measurement fell below the starting
    // point's: then the starting point stays (the search never ends on what it saw lose).
    int best = optimizer_->bestSample();
    if (optimizer_->score(static_cast<size_t>(best)) < optimizer_->score(0)) best = 0;
    next = sampled_[static_cast<size_t>(best)];
    final = true;
    log(next, optimizer_->score(static_cast<size_t>(best)), "best");
  } else {
    next = fromUnit(optimizer_->next());
  }
  proposal_ = encode(next, final);
  window_open_ = false;
}

void ParameterManager::log(const TunedParameters& p, double score, const char* what) {
  HORA_LOG(info, "autotune {} {}: fusion {} B, cycle {} us, cache {}, ring threshold {} B, bucket {} B, "
           "hierarchical allreduce {} allgather {}: {:.1f} bytes/us", what, optimizer_->samples(),
           p.fusion_threshold, p.cycle_time.count(), p.cache_enabled, p.ring_threshold, p.bucket_bytes,
           choiceText(p.hierarchical_allreduce), choiceText(p.hierarchical_allgather), score);
  if (!log_.is_open()) return;
  log_ << choiceText(p.hierarchical_allreduce) << ',' << choiceText(p.hierarchical_allgather) << ','
       << (p.cache_enabled ? 1 : 0) << ',' << std::chrono::duration<double, std::milli>(p.cycle_time).count() << ','
       << static_cast<double>(p.fusion_threshold) / (1 << 20) << ',' << p.ring_threshold << ',' << p.bucket_bytes
       << ',' << score << '\n';
  log_.flush();  // a job killed mid-search keeps its samples
}

ParameterManager::Wire ParameterManager::proposal() const {
  if (!proposal_) throw InternalError("autotune: no proposal to ship");
  return *proposal_;
}

TunedParameters ParameterManager::apply(const Wire& wire, Clock::time_point now) {
  bool final = false;
  current_ = decode(wire, &final);
  if (final) done_ = true;
  proposal_.reset();
  started_ = true;
  window_open_ = true;
  window_start_ = last_record_ = now;
  window_bytes_ = 0;
  runs_.clear();
  return current_;
}

ParameterManager::Wire ParameterManager::encode(const TunedParameters& p, bool final) {
  // Doubles hold every size below 2^53 exactly.
  return {final ? 1.0 : 0.0,
          static_cast<double>(p.fusion_threshold),
          static_cast<double>(p.cycle_time.count()),
          p.cache_enabled ? 1.0 : 0.0,
          static_cast<double>(p.ring_threshold),
          static_cast<double>(p.bucket_bytes),
          static_cast<double>(static_cast<int>(p.hierarchical_allreduce)),
          static_cast<double>(static_cast<int>(p.hierarchical_allgather))};
}

TunedParameters ParameterManager::decode(const Wire& w, bool* final) {
  if (final) *final = w[0] != 0;
  TunedParameters p;
  p.fusion_threshold = static_cast<size_t>(w[1]);
  p.cycle_time = std::chrono::microseconds(static_cast<int64_t>(w[2]));
  p.cache_enabled = w[3] != 0;
  p.ring_threshold = static_cast<size_t>(w[4]);
  p.bucket_bytes = static_cast<size_t>(w[5]);
  p.hierarchical_allreduce = static_cast<HierarchyChoice>(static_cast<int>(w[6]));
  p.hierarchical_allgather = static_cast<HierarchyChoice>(static_cast<int>(w[7]));
  return p;
}

}  // namespace hora::engine
