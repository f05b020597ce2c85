// horarun's knob flags: each sets a HORA_* variable of the knob registry (src/common/knobs.h)
// for every rank of the job.
//
// Named flags (horovodrun's spellings: --cycle-time-ms, --fusion-threshold-mb, ...) are rows of
// one table, knobFlags(): the flag, the knob it sets and how its value converts (MiB to bytes, a
// switch to "1"). A test checks that every knob of the table is a tuning knob of the registry.
// A knob may have several flags (--hierarchical-allreduce and --no-hierarchical-allreduce); two
// of them given together are a knob set twice.
// `--knob NAME=VALUE` (repeatable) reaches every other tuning knob: NAME is a HORA_* name or its
// HOROVOD_* alias; a name the registry does not hold, or one that horarun or a foreign launcher
// sets (HORA_RANK, HORA_SECRET, OMPI_COMM_WORLD_RANK, ...), is refused naming it. Every value is
// then judged by the parsers the ranks use (config.h, engine_options.h), so a bad one fails in
// horarun, before any rank starts. The values reach the ranks as -x variables do: in their
// environment (over ssh, on the remote command line; the job secret never goes there).
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hora::launcher {

// How the value given to a named flag becomes its knob's value.
enum class Conversion {
  kVerbatim,   // as given: --timeline-filename t.json -> HORA_TIMELINE=t.json
  kInteger,    // an integer in [min, max]
  kDecimal,    // a number in [min, max], written with six decimals: 2 -> 2.000000
  kMebibytes,  // a number of MiB in [min, max], written in bytes: 1 -> 1048576
  kSwitch,     // a flag without a value: sets the knob to `switch_value`
  kInterfaces, // horovodrun's comma-separated list of interfaces, of which hora uses one
};

struct KnobFlag {
  const char* flag;          // as CLI11 declares it: "--cycle-time-ms"
  const char* knob;          // HORA_CYCLE_TIME
  Conversion conversion;
  const char* switch_value;  // kSwitch only
  double min, max;           // kInteger, kDecimal, kMebibytes: accepted values, in the flag's unit
  const char* group;         // horovodrun's group of the flag in --help; "" hides it, as horovodrun does
  const char* help;          // without the knob's name, which is appended
};

std::span<const KnobFlag> knobFlags();

// The knob's value for a value of the flag (already checked against min and max).
std::string convertFlagValue(const KnobFlag& flag, const std::string& value);

// "NAME=VALUE" of --knob -> (HORA_* name, value). InvalidArgumentError naming NAME when it is no
// tuning knob of the registry.
std::pair<std::string, std::string> parseKnobAssignment(const std::string& assignment);

// Throws InvalidArgumentError naming the first variable whose value a rank would refuse.
void validateKnobValues(const std::map<std::string, std::string>& knobs);

// The named flags and --knob on a CLI11 app, and the knobs they set once it has parsed. The app
// holds pointers into this object: define() once, and keep it in place until parsing is done.
class KnobFlagValues {
 public:
  KnobFlagValues() = default;
  KnobFlagValues(const KnobFlagValues&) = delete;
  KnobFlagValues& operator=(const KnobFlagValues&) = delete;

  void define(CLI::App& app);
  // HORA_* name -> value for every rank. InvalidArgumentError when a knob is set twice (by two
  // flags, or a flag and --knob) or a value is refused (validateKnobValues).
  std::map<std::string, std::string> knobs() const;

 private:
  std::vector<CLI::Option*> options_;  // by row of knobFlags()
  std::vector<std::string> values_;    // by row of knobFlags(); switches have none
  std::vector<std::string> assignments_;  // of --knob, in order
};

}  // namespace hora::launcher
