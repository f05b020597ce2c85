// The one registry of HORA_* environment variables, and the only code that reads the process
// environment.
//
// Every variable hora reads is declared once in kKnobs (knobs.cc) with its group, default,
// Horovod alias and help text (its type is the getter its reader calls); docs/knobs.md and `horarun --help` are generated from that table.
// Env is an immutable snapshot taken once (at Communicator creation); typed getters validate the
// value and throw InvalidArgumentError naming the variable. A HOROVOD_* alias is accepted with a
// one-line notice when the HORA_* name is unset.
//
// Note [one source for defaults]: a default is decided here, in kKnobs, and nowhere else. The
// option structs (CommunicatorOptions, EngineOptions) keep member initializers so that they stay
// plain aggregates a caller can fill field by field, but those initializers are a mirror, not a
// second decision: a unit test (tests/cpp/common/config_test.cc, KnobDefaults.*) parses an empty
// environment and requires the result to equal a default-constructed struct (the structs have a
// defaulted operator==, so a new field is compared without anyone remembering to). Structs built
// only from those (ShmOptions, from CommunicatorOptions) take their defaults from them. The
// launcher-set knobs (HORA_RENDEZVOUS_ADDR, ...) have no default a struct could mirror: a job of
// more than one rank must set them. horarun's named flags are a table of (flag, knob,
// conversion) checked against this registry (launcher/knob_flags.h), and `horarun --knob
// NAME=VALUE` reaches every tuning knob.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hora::common {

// kLauncherSet: set by horarun for each rank. kTuning: set by users. kForeignLauncher: set by
// mpirun (OpenMPI, MPICH) or Slurm when a job is started without horarun (src/bootstrap/job/mpi_launch.h).
enum class KnobGroup { kLauncherSet, kTuning, kForeignLauncher };

// Note [knob agreement]: whether a knob must have one value on every rank of a job. kJob knobs
// change what ranks send each other or when they give up (algorithm choices, fusion, the
// response cache, chunking, transports, timeouts): ranks that disagree would wait for messages
// that never come. At Communicator::fromEnvironment every rank publishes its kJob values and
// rank 0 compares them (src/bootstrap/knob_agreement.h): a difference fails every rank, naming
// the knob, its values and the ranks holding each. kRank knobs may differ (log level, timeline
// file, interface name, how long to spin) or are set per rank by a launcher. kUnclassified
// exists so that a row that forgets to say is caught (KnobRegistry.EveryKnobIsClassified).
enum class KnobScope { kUnclassified, kJob, kRank };

struct KnobSpec {
  std::string_view name;
  std::string_view horovod_alias;  // empty when Horovod has no such variable
  KnobGroup group;
  KnobScope scope;
  std::string_view default_value;  // as text, as a user would write it
  std::string_view help;
};

std::span<const KnobSpec> allKnobs();
const KnobSpec& knob(std::string_view name);  // throws InternalError for an undeclared name
// The knob called `name` or whose Horovod alias is `name`; nullptr when there is none.
const KnobSpec* findKnob(std::string_view name);

// A markdown table of every knob (docs/knobs.md).
std::string knobsMarkdown();

class Env {
 public:
  // Snapshot of every declared knob, looked up through `lookup` (getenv by default; tests pass
  // a map).
  static Env fromProcess();
  static Env fromMap(const std::map<std::string, std::string>& values);
  // This snapshot with the knobs that `values` sets (by name or Horovod alias) taken from it:
  // horarun's environment beneath the variables it gives the workers (-x, --knob).
  Env overriddenBy(const std::map<std::string, std::string>& values) const;

  // The raw value set by the user, or nullopt when neither the name nor its alias is set.
  std::optional<std::string> raw(std::string_view name) const;
  bool isSet(std::string_view name) const { return raw(name).has_value(); }

  std::string getString(std::string_view name) const;
  int64_t getInt(std::string_view name, int64_t min, int64_t max) const;
  double getDouble(std::string_view name, double min, double max) const;
  bool getBool(std::string_view name) const;
  // Accepts plain bytes or a K/M/G suffix (powers of 1024).
  int64_t getBytes(std::string_view name, int64_t min, int64_t max) const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// A variable of the process environment that is no knob, which horarun passes on by name
// (-x NAME, PATH, PYTHONUNBUFFERED); nullopt when unset.
std::optional<std::string> processVariable(const std::string& name);

// Parses "64", "4K", "1M", "2G" (powers of 1024). nullopt when malformed.
std::optional<int64_t> parseBytes(std::string_view text);

}  // namespace hora::common
