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
constexpr KnobFlag kKnobFlags[] = {
    {"--network-interface", "HORA_IFACE", C::kVerbatim, "", 0, 0,
     "Interface whose address the ranks use to reach the store and each other"},
    {"--timeline-filename", "HORA_TIMELINE", C::kVerbatim, "", 0, 0, "Write a Chrome trace of the engine"},
    {"--timeline-mark-cycles", "HORA_TIMELINE_MARK_CYCLES", C::kSwitch, "1", 0, 0,
     "Mark engine cycles in the timeline"},
    {"--fusion-threshold-mb", "HORA_FUSION_THRESHOLD", C::kMebibytes, "", 0, 65536,
     "Tensor fusion buffer size in MiB"},
    {"--cycle-time-ms", "HORA_CYCLE_TIME", C::kDecimal, "", 0, 10000, "Engine cycle time in ms"},
    {"--cache-capacity", "HORA_CACHE_CAPACITY", C::kInteger, "", 0, 1 << 20, "Response cache capacity"},
    {"--no-stall-check", "HORA_STALL_CHECK_TIME_SECONDS", C::kSwitch, "0", 0, 0,
     "Disable the stall inspector's warnings"},
    {"--hierarchical-allreduce", "HORA_HIERARCHICAL_ALLREDUCE", C::kSwitch, "1", 0, 0,
     "Allreduce within each host, then among hosts, whatever the size"},
    {"--hierarchical-allgather", "HORA_HIERARCHICAL_ALLGATHER", C::kSwitch, "1", 0, 0,
     "Allgather among hosts, then within each host (auto does so too)"},
    {"--log-level", "HORA_LOG_LEVEL", C::kVerbatim, "", 0, 0, "trace, debug, info, warning, error"},
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
  engine::engineOptionsFrom(env);
}

void KnobFlagValues::define(CLI::App& app) {
  options_.clear();
  values_.assign(std::size(kKnobFlags), "");  // never resized later: CLI11 keeps pointers into it
  for (size_t i = 0; i < std::size(kKnobFlags); ++i) {
    const KnobFlag& f = kKnobFlags[i];
    if (f.conversion == C::kSwitch) {
      options_.push_back(app.add_flag(f.flag)->description(helpOf(f)));
      continue;
    }
    CLI::Option* o = app.add_option(f.flag, values_[i], helpOf(f));
    if (f.conversion == C::kInteger) o->check(CLI::Range(static_cast<int64_t>(f.min), static_cast<int64_t>(f.max)));
    if (f.conversion == C::kDecimal || f.conversion == C::kMebibytes) o->check(CLI::Range(f.min, f.max));
    options_.push_back(o);
  }
  app.add_option("--knob", assignments_,
                 "Set a tuning knob NAME=VALUE for every rank (a HORA_* name of docs/knobs.md or its HOROVOD_* "
                 "alias); repeatable")
      ->allow_extra_args(false);  // one value per --knob: the command follows
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
