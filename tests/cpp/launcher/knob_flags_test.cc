// horarun's knob flags (launcher/knob_flags.h): the named flags' table against the knob
// registry, --knob's names and values, and both on a parsed command line.
#include <gtest/gtest.h>

#include <set>

#include "common/knobs.h"
#include "engine/engine_options.h"
#include "expect_error.h"
#include "launcher/flags.h"
#include "launcher/knob_flags.h"

namespace hora::testing {
namespace {

using launcher::CommandLine;
using launcher::knobFlags;
using launcher::parseKnobAssignment;

TEST(KnobFlags, EveryNamedFlagSetsATuningKnobOfTheRegistryByItsOwnName) {
  std::set<std::string> flags, knobs;
  for (const auto& f : knobFlags()) {
    const common::KnobSpec* spec = common::findKnob(f.knob);
    ASSERT_NE(spec, nullptr) << f.flag << " sets " << f.knob << ", which the registry does not declare";
    EXPECT_EQ(spec->name, f.knob) << f.flag << " names a Horovod alias";
    EXPECT_EQ(spec->group, common::KnobGroup::kTuning) << f.flag << " sets " << f.knob << ", not a tuning knob";
    EXPECT_TRUE(flags.insert(f.flag).second) << f.flag << " is declared twice";
    // A knob may have several flags (a switch and its --no- twin, horovodrun's old names), but
    // only horovodrun's deprecated spellings repeat one meaning.
    const std::string meaning = std::string(f.knob) + "=" + (f.conversion == launcher::Conversion::kSwitch
                                                               ? f.switch_value
                                                               : "(value " + std::to_string(int(f.conversion)) + ")");
    if (!*f.group) continue;  // hidden: an alias of a listed flag
    EXPECT_TRUE(knobs.insert(meaning).second) << f.flag << ": another listed flag already sets " << meaning;
  }
}

TEST(KnobFlags, NamedFlagsKeepHorovodrunsUnits) {
  const auto row = [](std::string_view flag) {
    for (const auto& f : knobFlags())
      if (f.flag == flag) return f;
    throw std::runtime_error("no flag " + std::string(flag));
  };
  EXPECT_EQ(convertFlagValue(row("--fusion-threshold-mb"), "1"), "1048576");
  EXPECT_EQ(convertFlagValue(row("--fusion-threshold-mb"), "0.5"), "524288");
  EXPECT_EQ(convertFlagValue(row("--cycle-time-ms"), "2"), "2.000000");
  EXPECT_EQ(convertFlagValue(row("--cache-capacity"), "8"), "8");
  EXPECT_EQ(convertFlagValue(row("--no-stall-check"), ""), "0");
  EXPECT_EQ(convertFlagValue(row("--timeline-filename"), "t.json"), "t.json");
}

TEST(KnobFlags, KnobTakesANameOrItsHorovodAlias) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(parseKnobAssignment("HORA_SPIN_MICROSECONDS=7"), P("HORA_SPIN_MICROSECONDS", "7"));
  EXPECT_EQ(parseKnobAssignment("HOROVOD_CYCLE_TIME=3"), P("HORA_CYCLE_TIME", "3"));
  EXPECT_EQ(parseKnobAssignment("HORA_TIMELINE=a=b.json"), P("HORA_TIMELINE", "a=b.json"));
  EXPECT_EQ(parseKnobAssignment("HORA_IFACE="), P("HORA_IFACE", ""));
}

// Every tuning knob is reachable from horarun: --knob takes each, with its default as the value.
TEST(KnobFlags, KnobReachesEveryTuningKnobOfTheRegistry) {
  std::map<std::string, std::string> defaults;
  for (const auto& k : common::allKnobs()) {
    if (k.group != common::KnobGroup::kTuning) continue;
    const auto [name, value] = parseKnobAssignment(std::string(k.name) + "=" + std::string(k.default_value));
    EXPECT_EQ(name, k.name);
    defaults[name] = value;
  }
  EXPECT_GT(defaults.size(), 10u);
  launcher::validateKnobValues(defaults);
}

TEST(KnobFlags, KnobRefusesWhatIsNoTuningKnobNamingIt) {
  expectInvalid([] { parseKnobAssignment("HORA_NO_SUCH_KNOB=1"); }, "--knob HORA_NO_SUCH_KNOB: no such knob");
  expectInvalid([] { parseKnobAssignment("HORA_RANK=3"); }, "--knob HORA_RANK: horarun sets it");
  expectInvalid([] { parseKnobAssignment("HORA_SECRET=x"); }, "--knob HORA_SECRET: horarun sets it");
  expectInvalid([] { parseKnobAssignment("HOROVOD_SIZE=2"); }, "--knob HOROVOD_SIZE: horarun sets it");
  expectInvalid([] { parseKnobAssignment("PMI_RANK=0"); }, "--knob PMI_RANK: mpirun or Slurm sets it");
  expectInvalid([] { parseKnobAssignment("HORA_CYCLE_TIME"); }, "expected NAME=VALUE");
}

TEST(KnobFlags, ValuesAreJudgedAsTheRanksJudgeThem) {
  launcher::validateKnobValues({{"HORA_CYCLE_TIME", "2.5"}, {"HORA_TRANSPORT", "tcp"}});
  expectInvalid([] { launcher::validateKnobValues({{"HORA_CYCLE_TIME", "soon"}}); }, "HORA_CYCLE_TIME='soon'");
  expectInvalid([] { launcher::validateKnobValues({{"HORA_TRANSPORT", "pigeon"}}); }, "HORA_TRANSPORT='pigeon'");
  expectInvalid([] { launcher::validateKnobValues({{"HORA_LOG_LEVEL", "loud"}}); }, "HORA_LOG_LEVEL='loud'");
}

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "horarun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return launcher::parseCommandLine(static_cast<int>(argv.size()), argv.data());
}

TEST(KnobFlags, NamedFlagsAndKnobSetTheRanksVariables) {
  const CommandLine c = parse({"-np", "2", "--cycle-time-ms", "2", "--knob", "HORA_SPIN_MICROSECONDS=7",
                               "--knob", "HOROVOD_LOG_LEVEL=error", "--network-interface", "lo", "true", "--knob"});
  ASSERT_EQ(c.action, CommandLine::Action::kRun);
  const std::map<std::string, std::string> expected = {{"HORA_CYCLE_TIME", "2.000000"},
                                                       {"HORA_SPIN_MICROSECONDS", "7"},
                                                       {"HORA_LOG_LEVEL", "error"},
                                                       {"HORA_IFACE", "lo"}};
  EXPECT_EQ(c.job.knobs, expected);
  EXPECT_EQ(c.job.network_interface, "lo");
  EXPECT_EQ(c.job.command, (std::vector<std::string>{"true", "--knob"}));  // the command's own arguments
}

// horovodrun's --autotune flags set HORA_AUTOTUNE*, and the ranks read them (or the
// HOROVOD_AUTOTUNE* aliases) into EngineOptions::autotune.
TEST(KnobFlags, AutotuneFlagsAreHorovodrunsAndReachTheEngineOptions) {
  const CommandLine c = parse({"-np", "2", "--autotune", "--autotune-log-file", "at.csv", "--autotune-warmup-samples",
                               "2", "--autotune-steps-per-sample", "7", "--autotune-bayes-opt-max-samples", "40",
                               "--autotune-gaussian-process-noise", "0.5", "--fusion-threshold-mb", "2", "true"});
  ASSERT_EQ(c.action, CommandLine::Action::kRun);
  const std::map<std::string, std::string> expected = {{"HORA_AUTOTUNE", "1"},
                                                       {"HORA_AUTOTUNE_LOG", "at.csv"},
                                                       {"HORA_AUTOTUNE_WARMUP_SAMPLES", "2"},
                                                       {"HORA_AUTOTUNE_STEPS_PER_SAMPLE", "7"},
                                                       {"HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "40"},
                                                       {"HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.500000"},
                                                       {"HORA_FUSION_THRESHOLD", "2097152"}};
  EXPECT_EQ(c.job.knobs, expected);
  const EngineOptions o = engine::engineOptionsFrom(common::Env::fromMap(c.job.knobs));
  EXPECT_TRUE(o.autotune.enabled);
  EXPECT_EQ(o.autotune.log, "at.csv");
  EXPECT_EQ(o.autotune.warmup_samples, 2);
  EXPECT_EQ(o.autotune.steps_per_sample, 7);
  EXPECT_EQ(o.autotune.max_samples, 40);
  EXPECT_EQ(o.autotune.noise, 0.5);
  EXPECT_EQ(o.autotune.fixed, std::vector<std::string>{"HORA_FUSION_THRESHOLD"}) << "a knob the user set stays fixed";
  const EngineOptions h = engine::engineOptionsFrom(common::Env::fromMap(
      {{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "60"}, {"HOROVOD_CYCLE_TIME", "3"}}));
  EXPECT_TRUE(h.autotune.enabled);
  EXPECT_EQ(h.autotune.max_samples, 60);
  EXPECT_EQ(h.autotune.fixed, std::vector<std::string>{"HORA_CYCLE_TIME"});
  ::testing::internal::CaptureStderr();
  const CommandLine zero = parse({"-np", "1", "--autotune-steps-per-sample", "0", "true"});
  EXPECT_EQ(zero.action, CommandLine::Action::kExit);
  EXPECT_NE(zero.exit_code, 0);
  ::testing::internal::GetCapturedStderr();
}

TEST(KnobFlags, AKnobSetTwiceOrABadOneEndsHorarunWithCode2) {
  ::testing::internal::CaptureStderr();
  const CommandLine twice = parse({"-np", "1", "--cycle-time-ms", "2", "--knob", "HORA_CYCLE_TIME=3", "true"});
  EXPECT_EQ(twice.action, CommandLine::Action::kExit);
  EXPECT_EQ(twice.exit_code, 2);
  const CommandLine unknown = parse({"-np", "1", "--knob", "HORA_RANKK=1", "true"});
  EXPECT_EQ(unknown.exit_code, 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("HORA_CYCLE_TIME is set twice: by --cycle-time-ms and by --knob HORA_CYCLE_TIME"),
            std::string::npos) << err;
  EXPECT_NE(err.find("--knob HORA_RANKK: no such knob"), std::string::npos) << err;
}

}  // namespace
}  // namespace hora::testing
