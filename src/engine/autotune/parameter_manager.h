// ParameterManager: the autotuner's bookkeeping (Horovod's ParameterManager). It scores the
// parameters in force from the allreduces each cycle ran, asks the BayesianOptimizer for the
// next parameters, writes the log, and says when there is something for the ranks to apply.
// It neither talks to other ranks nor applies anything: the Runtime ships what the coordinator
// proposes and applies it on every rank (Note [autotuning]).
//
// Thread safety: engine thread only.
#pragma once

#include <array>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/autotune/bayesian_optimizer.h"
#include "hora/engine.h"

namespace hora::engine {

// Note [autotuning]: with HORA_AUTOTUNE=1 the engine of process set 0 tunes, while the job
// trains, the knobs the user did not set among: the fusion threshold, the cycle time, the
// response cache on/off, the ring threshold of the world's plan, the bucket size (Note
// [buckets]) and, when the ranks span several even hosts, the hierarchical allreduce and
// allgather (on one host there is no hierarchy to choose, so those are left out and the log
// says so).
//   Score: bytes allreduced per microsecond (Horovod's unit) over a window of
// HORA_AUTOTUNE_STEPS_PER_SAMPLE training steps. The engine knows no steps, so, as Horovod
// does, a step is counted each time a tensor name is allreduced again: the window ends when some
// name has run that many times since it began. The time is wall time, so everything the
// parameters change (waiting, fusing, the collectives, the engine's wake-ups) is in it.
//   Search: the first HORA_AUTOTUNE_WARMUP_SAMPLES windows are discarded; the next sample scores
// the parameters the job started with (the defaults and the user's fixed knobs), so the search
// never ends worse than them; then Bayesian optimisation (bayesian_optimizer.h) over the unit
// box, each knob mapped onto [0, 1] (sizes on a log scale), for HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
// scored samples in all. The search then keeps the sample of highest posterior mean (not the
// highest single score, which noise favours) and stops scoring.
//   Agreement: only rank 0 (the coordinator) scores and decides. When it has new parameters it
// clears a byte of the next cycle's control vector (control_vector.h); the Min allreduce tells
// every rank in that cycle, and every rank then joins a broadcast of the parameters from rank 0
// and applies them before executing the cycle's responses. So every rank applies the same
// parameters at the same cycle, at the cost of one byte per cycle while nothing changes.
class ParameterManager {
 public:
  using Clock = std::chrono::steady_clock;
  // The wire form of TunedParameters plus the "final" flag, broadcast from rank 0.
  static constexpr size_t kWireSize = 8;
  using Wire = std::array<double, kWireSize>;

  // `initial`: the parameters the job starts with; `ring_knob`: the knob whose threshold the
  // world's plan uses (HORA_SHM_RING_THRESHOLD over shared memory, else HORA_RING_THRESHOLD);
  // `hierarchy_possible`: the ranks span even hosts; `coordinator`: this rank decides (rank 0).
  // Opens the log (coordinator only); InvalidArgumentError naming HORA_AUTOTUNE_LOG when it
  // cannot.
  ParameterManager(const AutotuneOptions& options, const TunedParameters& initial, const std::string& ring_knob,
                   bool hierarchy_possible, bool coordinator);

  // After each cycle: the allreduces it ran, by name and bytes. Returns true when the
  // coordinator has parameters to ship (then proposal() holds them).
  bool record(const std::vector<std::pair<std::string, size_t>>& allreduced, Clock::time_point now);
  bool hasProposal() const { return proposal_.has_value(); }
  Wire proposal() const;

  // Every rank, when the cycle's broadcast delivered new parameters: returns them decoded and
  // starts the next window.
  TunedParameters apply(const Wire& wire, Clock::time_point now);
  bool done() const { return done_; }

  static Wire encode(const TunedParameters& p, bool final);
  static TunedParameters decode(const Wire& w, bool* final = nullptr);

  // The knobs being tuned, in the optimiser's coordinate order (e.g. "HORA_FUSION_THRESHOLD").
  const std::vector<std::string>& tunedKnobs() const { return names_; }

 private:
  enum class Knob { kFusion, kCycle, kCache, kRing, kBucket, kHierAllreduce, kHierAllgather };
  struct Dimension {
    Knob knob;
    std::string name;  // the HORA_* knob
  };
  std::vector<double> toUnit(const TunedParameters& p) const;
  // Each coordinate of x sets its knob; the others keep `base`'s values.
  TunedParameters fromUnit(const std::vector<double>& x) const;
  void endWindow(double score);
  void log(const TunedParameters& p, double score, const char* what);

  const AutotuneOptions options_;
  const TunedParameters initial_;
  const bool coordinator_;
  std::vector<Dimension> dims_;
  std::vector<std::string> names_;
  std::optional<BayesianOptimizer> optimizer_;  // null when every knob is fixed
  std::vector<TunedParameters> sampled_;        // by sample of the optimiser

  TunedParameters current_;
  int warmup_left_;
  bool done_ = false;
  bool started_ = false;     // the first window has begun
  bool window_open_ = true;  // false between a proposal and its application
  Clock::time_point window_start_, last_record_;
  uint64_t window_bytes_ = 0;
  std::map<std::string, int> runs_;  // per name, in this window
  std::optional<Wire> proposal_;
  std::ofstream log_;
};

}  // namespace hora::engine
