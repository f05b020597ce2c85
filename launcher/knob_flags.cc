#include "launcher/knob_flags.h"

#include <cstdint>

#include "common/config.h"
#include "common/knobs.h"
#include "engine/engine_options.h"
#include "hora/errors.h"

namespace hora::launcher {
namespace {

using C = Conversion;

// Note [knob flags]: a named flag is a row here and nowhere else; KnobFlags.* tests that every
// knob named here is a tuning knob of the registry.
constexpr const char* kTuneable = "tuneable parameter arguments";
constexpr const char* kTimeline = "timeline arguments";
constexpr const char* kStallCheck = "stall check arguments";
constexpr const char* kLibrary = "library arguments";
constexpr const char* kLogging = "logging arguments";
constexpr const char* kAutotune = "autotune arguments";
constexpr const char* kHidden = "";  // accepted, not listed (horovodrun hides these too)

constexpr KnobFlag kKnobFlags[] = {
    {"--network-interfaces", "HORA_IFACE", C::kInterfaces, "", 0, 0, "Options",
     "Network interface for the store and the ranks' connections (horovodrun takes a comma-separated "
     "list; hora uses one)"},
    {"--network-interface", "HORA_IFACE", C::kVerbatim, "", 0, 0, "Options",
     "Interface whose address the ranks use to reach the store and each other"},
    {"--fusion-threshold-mb", "HORA_FUSION_THRESHOLD", C::kMebibytes, "", 0, 65536, kTuneable,
     "Tensor fusion buffer size in MiB"},
    {"--cycle-time-ms", "HORA_CYCLE_TIME", C::kDecimal, "", 0, 10000, kTuneable, "Engine cycle time in ms"},
    {"--cache-capacity", "HORA_CACHE_CAPACITY", C::kInteger, "", 0, 1 << 20, kTuneable, "Response cache capacity"},
    {"--hierarchical-allreduce", "HORA_HIERARCHICAL_ALLREDUCE", C::kSwitch, "1", 0, 0, kTuneable,
     "Allreduce within each host, then among hosts, whatever the size"},
    {"--no-hierarchical-allreduce", "HORA_HIERARCHICAL_ALLREDUCE", C::kSwitch, "0", 0, 0, kTuneable,
     "Never allreduce hierarchically: one flat ring or recursive doubling"},
    {"--hierarchical-allgather", "HORA_HIERARCHICAL_ALLGATHER", C::kSwitch, "1", 0, 0, kTuneable,
     "Allgather among hosts, then within each host (auto does so too)"},
    {"--no-hierarchical-allgather", "HORA_HIERARCHICAL_ALLGATHER", C::kSwitch, "0", 0, 0, kTuneable,
     "Never allgather hierarchically"},
    {"--autotune", "HORA_AUTOTUNE", C::kSwitch, "1", 0, 0, kAutotune, "Tune the engine's knobs while the job trains"},
    {"--no-autotune", "HORA_AUTOTUNE", C::kSwitch, "0", 0, 0, kAutotune, "Do not tune the engine's knobs (the default)"},
    {"--autotune-log-file", "HORA_AUTOTUNE_LOG", C::kVerbatim, "", 0, 0, kAutotune,
     "Write every autotuning sample to this CSV"},
    {"--autotune-warmup-samples", "HORA_AUTOTUNE_WARMUP_SAMPLES", C::kInteger, "", 0, 1000, kAutotune,
     "Autotuning samples discarded at the start"},
    {"--autotune-steps-per-sample", "HORA_AUTOTUNE_STEPS_PER_SAMPLE", C::kInteger, "", 1, 100000, kAutotune,
     "Training steps per autotuning sample"},
    {"--autotune-bayes-opt-max-samples", "HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", C::kInteger, "", 1, 1000, kAutotune,
     "Scored autotuning samples before the best parameters are kept"},
    {"--autotune-gaussian-process-noise", "HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", C::kDecimal, "", 0, 100, kAutotune,
     "Noise the autotuner's Gaussian process assumes"},
    {"--timeline-filename", "HORA_TIMELINE", C::kVerbatim, "", 0, 0, kTimeline, "Write a Chrome trace of the engine"},
    {"--timeline-mark-cycles", "HORA_TIMELINE_MARK_CYCLES", C::kSwitch, "1", 0, 0, kTimeline,
     "Mark engine cycles in the timeline"},
    {"--no-timeline-mark-cycles", "HORA_TIMELINE_MARK_CYCLES", C::kSwitch, "0", 0, 0, kHidden,
     "Do not mark engine cycles in the timeline"},
    {"--no-stall-check", "HORA_STALL_CHECK_TIME_SECONDS", C::kSwitch, "0", 0, 0, kStallCheck,
     "Disable the stall inspector's warnings"},
    {"--stall-check-warning-time-seconds", "HORA_STALL_CHECK_TIME_SECONDS", C::kInteger, "", 0, 1 << 30, kStallCheck,
     "Seconds until rank 0 warns of a stall, naming the missing ranks"},
    {"--stall-check-shutdown-time-seconds", "HORA_STALL_SHUTDOWN_TIME_SECONDS", C::kInteger, "", 0, 1 << 30,
     kStallCheck, "Seconds until a stall fails the job on every rank; 0 = never"},
    {"--tcp", "HORA_TRANSPORT", C::kSwitch, "tcp", 0, 0, kLibrary,
     "Use TCP only, also between the ranks of a host"},
    {"--thread-affinity", "HORA_THREAD_AFFINITY", C::kVerbatim, "", 0, 0, kLibrary,
     "Cores for the engine threads, by local rank: the i-th core for local rank i (e.g. 0,1,2,3)"},
    {"--gloo-timeout-seconds", "HORA_TIMEOUT_SECONDS", C::kInteger, "", 1, 1 << 30, kLibrary,
     "Seconds a collective or a connection may take before the job fails"},
    {"--log-level", "HORA_LOG_LEVEL", C::kVerbatim, "", 0, 0, kLogging, "trace, debug, info, warning, error"},
    {"--log-without-timestamp", "HORA_LOG_HIDE_TIME", C::kSwitch, "1", 0, 0, kLogging,
     "Hide the time in hora's log lines"},
    {"--log-hide-timestamp", "HORA_LOG_HIDE_TIME", C::kSwitch, "1", 0, 0, kHidden,
     "Hide the time in hora's log lines (horovodrun's old name)"},
    {"--log-with-timestamp", "HORA_LOG_HIDE_TIME", C::kSwitch, "0", 0, 0, kHidden,
     "Show the time in hora's log lines (the default)"},
    {"--no-log-hide-timestamp", "HORA_LOG_HIDE_TIME", C::kSwitch, "0", 0, 0, kHidden,
     "Show the time in hora's log lines (horovodrun's old name)"},
};

std::string helpOf(const KnobFlag& f) {
  if (f.conversion == C::kSwitch) return std::string(f.help) + " (" + f.knob + "=" + f.switch_value + ")";
  return std::string(f.help) + " (" + f.knob + ")";
}

}  // namespace

std::span<const KnobFlag> knobFlags() { return kKnobFlags; }

std::string convertFlagValue(const KnobFlag& flag, const std::string& value) {
  switch (flag.conversion) {
    case C::kVerbatim: return value;
    case C::kInteger: return std::to_string(std::stoll(value));
    case C::kDecimal: return std::to_string(std::stod(value));
    case C::kMebibytes: return std::to_string(static_cast<int64_t>(std::stod(value) * 1048576));
    case C::kSwitch: return flag.switch_value;
    case C::kInterfaces:
      if (value.find(',') != std::string::npos)
        throw InvalidArgumentError(std::string(flag.flag) + " " + value +
                                   ": hora's ranks use one interface (HORA_IFACE); name one");
      return value;
  }
  return value;
}

std::pair<std::string, std::string> parseKnobAssignment(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InvalidArgumentError("--knob " + assignment + ": expected NAME=VALUE");
  const std::string name = assignment.substr(0, eq);
  const common::KnobSpec* spec = common::findKnob(name);
  if (!spec)
    throw InvalidArgumentError("--knob " + name + ": no such knob (docs/knobs.md lists them; horarun --knobs-markdown)");
  if (spec->group == common::KnobGroup::kLauncherSet)
    throw InvalidArgumentError("--knob " + name + ": horarun sets it for each rank itself; only tuning knobs may be given");
  if (spec->group == common::KnobGroup::kForeignLauncher)
    throw InvalidArgumentError("--knob " + name + ": mpirun or Slurm sets it; only tuning knobs may be given");
  return {std::string(spec->name), assignment.substr(eq + 1)};
}

void validateKnobValues(const std::map<std::string, std::string>& knobs) {
  const auto env = common::Env::fromMap(knobs);
  common::communicatorOptionsFrom(env);
  common::logLevelFrom(env);
  env.getBool("HORA_LOG_HIDE_TIME");
  engine::engineOptionsFrom(env);
}

void KnobFlagValues::define(CLI::App& app) {
  options_.clear();
  values_.assign(std::size(kKnobFlags), "");  // never resized later: CLI11 keeps pointers into it
  for (size_t i = 0; i < std::size(kKnobFlags); ++i) {
    const KnobFlag& f = kKnobFlags[i];
    if (f.conversion == C::kSwitch) {
      options_.push_back(app.add_flag(f.flag)->description(helpOf(f))->group(f.group));
      continue;
    }
    CLI::Option* o = app.add_option(f.flag, values_[i], helpOf(f))->group(f.group);
    if (f.conversion == C::kInteger) o->check(CLI::Range(static_cast<int64_t>(f.min), static_cast<int64_t>(f.max)));
    if (f.conversion == C::kDecimal || f.conversion == C::kMebibytes) o->check(CLI::Range(f.min, f.max));
    options_.push_back(o);
  }
  app.add_option("--knob", assignments_,
                 "Set a tuning knob NAME=VALUE for every rank (a HORA_* name of docs/knobs.md or its HOROVOD_* "
                 "alias); repeatable")
      ->allow_extra_args(false)  // one value per --knob: the command follows
      ->group(kTuneable);
}

std::map<std::string, std::string> KnobFlagValues::knobs() const {
  std::map<std::string, std::string> knobs, given_by;
  const auto set = [&](const std::string& knob, const std::string& value, const std::string& flag) {
    if (given_by.count(knob))
      throw InvalidArgumentError(knob + " is set twice: by " + given_by[knob] + " and by " + flag);
    knobs[knob] = value;
    given_by[knob] = flag;
  };
  for (size_t i = 0; i < std::size(kKnobFlags); ++i)
    if (options_[i]->count() > 0) set(kKnobFlags[i].knob, convertFlagValue(kKnobFlags[i], values_[i]), kKnobFlags[i].flag);
  for (const auto& a : assignments_) {
    const auto [knob, value] = parseKnobAssignment(a);
    set(knob, value, "--knob " + a.substr(0, a.find('=')));
  }
  validateKnobValues(knobs);
  return knobs;
}

}  // namespace hora::launcher
