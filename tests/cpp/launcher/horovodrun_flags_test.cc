// horarun's command line against horovodrun's (Note [horovodrun's flags], launcher/flags.cc):
// every flag of horovodrun's parser is accepted with its meaning or refused saying why it cannot
// apply, never taken for an unknown flag; the flags that set knobs set the right ones; and
// horovodrun's YAML config file works, the command line winning.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "launcher/flags.h"
#include "launcher/forwarded_env.h"

namespace hora::testing {
namespace {

using launcher::CommandLine;

// Every flag of horovodrun's parser in Horovod 0.28.1 (horovod/runner/launch.py, parse_args),
// with all its spellings and a value when it takes one, read off that file by hand.
struct HorovodrunFlag {
  std::vector<std::string> spellings;
  std::vector<std::string> values;  // empty: a switch
};

const std::vector<HorovodrunFlag>& horovodrunFlags() {
  static const std::vector<HorovodrunFlag> flags = {
      {{"-v", "--version"}, {}},
      {{"-np", "--num-proc"}, {"2"}},
      {{"-cb", "--check-build"}, {}},
      {{"--disable-cache"}, {}},
      {{"--start-timeout"}, {"30"}},
      {{"--network-interfaces"}, {"lo"}},
      {{"--network-interface"}, {"lo"}},
      {{"--output-filename"}, {"/tmp/hora-flags-test-out"}},
      {{"--verbose"}, {}},
      {{"--config-file"}, {"CONFIG"}},
      // SSH arguments
      {{"-p", "--ssh-port"}, {"2222"}},
      {{"-i", "--ssh-identity-file"}, {"/tmp/id"}},
      // tuneable parameter arguments
      {{"--fusion-threshold-mb"}, {"32"}},
      {{"--cycle-time-ms"}, {"2.5"}},
      {{"--cache-capacity"}, {"512"}},
      {{"--hierarchical-allreduce"}, {}},
      {{"--no-hierarchical-allreduce"}, {}},
      {{"--hierarchical-allgather"}, {}},
      {{"--no-hierarchical-allgather"}, {}},
      {{"--torus-allreduce"}, {}},
      {{"--no-torus-allreduce"}, {}},
      // autotune arguments
      {{"--autotune"}, {}},
      {{"--no-autotune"}, {}},
      {{"--autotune-log-file"}, {"/tmp/at.csv"}},
      {{"--autotune-warmup-samples"}, {"3"}},
      {{"--autotune-steps-per-sample"}, {"10"}},
      {{"--autotune-bayes-opt-max-samples"}, {"20"}},
      {{"--autotune-gaussian-process-noise"}, {"0.8"}},
      // elastic arguments
      {{"--min-np", "--min-num-proc"}, {"1"}},
      {{"--max-np", "--max-num-proc"}, {"4"}},
      // also gives static hosts their slots; "--slots" is its argparse abbreviation
      {{"--slots-per-host", "--slots"}, {"2"}},
      {{"--elastic-timeout"}, {"600"}},
      {{"--reset-limit"}, {"3"}},
      {{"--blacklist-cooldown-range"}, {"10", "100"}},
      // timeline arguments
      {{"--timeline-filename"}, {"/tmp/t.json"}},
      {{"--timeline-mark-cycles"}, {}},
      {{"--no-timeline-mark-cycles"}, {}},
      // stall check arguments
      {{"--no-stall-check"}, {}},
      {{"--stall-check"}, {}},
      {{"--stall-check-warning-time-seconds"}, {"30"}},
      {{"--stall-check-shutdown-time-seconds"}, {"120"}},
      // library arguments
      {{"--mpi-threads-disable"}, {}},
      {{"--no-mpi-threads-disable"}, {}},
      {{"--mpi-args"}, {"MPI"}},  // needs --mpi, added below
      {{"--tcp"}, {}},
      {{"--binding-args"}, {"MPI"}},
      {{"--num-nccl-streams"}, {"2"}},
      {{"--thread-affinity"}, {"0,1"}},
      {{"--gloo-timeout-seconds"}, {"45"}},
      // logging arguments
      {{"--log-level"}, {"WARNING"}},
      {{"--log-with-timestamp"}, {}},
      {{"--log-without-timestamp"}, {}},
      {{"-prefix-timestamp", "--prefix-output-with-timestamp"}, {}},
      {{"--log-hide-timestamp"}, {}},
      {{"--no-log-hide-timestamp"}, {}},
      // host arguments
      {{"-H", "--hosts"}, {"localhost:2"}},
      {{"-hostfile", "--hostfile"}, {"HOSTFILE"}},
      {{"--host-discovery-script"}, {"/tmp/discover.sh"}},
      // controller arguments
      {{"--gloo"}, {}},
      {{"--mpi"}, {}},
      {{"--jsrun"}, {}},
  };
  return flags;
}

struct Parsed {
  CommandLine line;
  std::string stderr_text;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "horarun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();  // --version, --help
  Parsed p{launcher::parseCommandLine(static_cast<int>(argv.size()), argv.data())};
  ::testing::internal::GetCapturedStdout();
  p.stderr_text = ::testing::internal::GetCapturedStderr();
  return p;
}

std::string writeFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(HorovodrunFlags, EveryFlagIsAcceptedOrRefusedWithAReasonNeverUnknown) {
  const std::string config = writeFile("hora_flags_config.yaml", "params:\n  cache_capacity: 64\n");
  const std::string hostfile = writeFile("hora_flags_hosts", "localhost slots=2\n");
  int accepted = 0, refused = 0;
  for (const auto& f : horovodrunFlags()) {
    for (const auto& spelling : f.spellings) {
      std::vector<std::string> args = {"-np", "1", spelling};
      if (f.spellings[0] == "-np") args = {spelling};
      for (auto v : f.values) {
        if (v == "CONFIG") v = config;
        if (v == "HOSTFILE") v = hostfile;
        if (v == "MPI") {
          args.back() += "=--oversubscribe";  // horovodrun's advice: the value after '='
          args.push_back("--mpi");
          continue;
        }
        args.push_back(v);
      }
      args.push_back("true");
      const Parsed p = parse(args);
      const bool unknown = p.stderr_text.find("unknown flag") != std::string::npos ||
                           p.stderr_text.find("following argument") != std::string::npos;
      EXPECT_FALSE(unknown) << spelling << " is unknown to horarun: " << p.stderr_text;
      if (p.line.action == CommandLine::Action::kExit && p.line.exit_code != 0) {
        ++refused;
        EXPECT_EQ(p.line.exit_code, 2) << spelling;
        EXPECT_NE(p.stderr_text.find(spelling + " cannot apply: "), std::string::npos) << p.stderr_text;
      } else {
        ++accepted;
      }
    }
  }
  EXPECT_EQ(refused, 3);  // --torus-allreduce, --num-nccl-streams, --jsrun
  EXPECT_EQ(accepted, 69);
}

std::map<std::string, std::string> knobsOf(std::vector<std::string> args) {
  args.push_back("true");
  const Parsed p = parse(args);
  EXPECT_EQ(p.line.action, CommandLine::Action::kRun) << p.stderr_text;
  return p.line.job.knobs;
}

TEST(HorovodrunFlags, KnobFlagsSetHorovodsMeaning) {
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(knobsOf({"-np", "1", "--tcp"}), (M{{"HORA_TRANSPORT", "tcp"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--no-hierarchical-allreduce", "--no-hierarchical-allgather"}),
            (M{{"HORA_HIERARCHICAL_ALLREDUCE", "0"}, {"HORA_HIERARCHICAL_ALLGATHER", "0"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--gloo-timeout-seconds", "45", "--stall-check-warning-time-seconds", "20",
                     "--stall-check-shutdown-time-seconds", "90"}),
            (M{{"HORA_TIMEOUT_SECONDS", "45"},
               {"HORA_STALL_CHECK_TIME_SECONDS", "20"},
               {"HORA_STALL_SHUTDOWN_TIME_SECONDS", "90"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--log-without-timestamp", "--log-level", "DEBUG"}),
            (M{{"HORA_LOG_HIDE_TIME", "1"}, {"HORA_LOG_LEVEL", "DEBUG"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--log-hide-timestamp"}), (M{{"HORA_LOG_HIDE_TIME", "1"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--thread-affinity", "1,0"}), (M{{"HORA_THREAD_AFFINITY", "1,0"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--network-interfaces", "lo"}), (M{{"HORA_IFACE", "lo"}}));
  EXPECT_EQ(knobsOf({"-np", "1", "--no-timeline-mark-cycles"}), (M{{"HORA_TIMELINE_MARK_CYCLES", "0"}}));
}

TEST(HorovodrunFlags, WhatCannotApplyIsRefusedNamingTheFlag) {
  const auto refusal = [](std::vector<std::string> args) {
    args.push_back("true");
    const Parsed p = parse(args);
    EXPECT_EQ(p.line.exit_code, 2) << p.stderr_text;
    return p.stderr_text;
  };
  EXPECT_NE(refusal({"-np", "1", "--network-interfaces", "eth0,eth1"}).find("use one interface"), std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--jsrun"}).find("--jsrun cannot apply: jsrun is IBM's launcher"),
            std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--num-nccl-streams", "2"}).find("no NCCL"), std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--hierarchical-allreduce", "--no-hierarchical-allreduce"}).find("set twice"),
            std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--thread-affinity", "0,x"}).find("HORA_THREAD_AFFINITY='0,x'"), std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--mpi", "--mpi-args=--x 'y"}).find("--mpi-args"), std::string::npos);
  EXPECT_NE(refusal({"-np", "1", "--mpi", "--gloo"}).find("excludes"), std::string::npos);
}

TEST(HorovodrunFlags, SingleDashSpellingsAndLauncherFlags) {
  const std::string hostfile = writeFile("hora_flags_hosts2", "localhost\n127.0.0.1 slots=3\n");
  const Parsed p = parse({"-np", "2", "-hostfile", hostfile, "-prefix-timestamp", "--slots-per-host", "4", "--mpi",
                          "--mpi-args=-mca btl self,tcp --oversubscribe", "--binding-args=--bind-to core", "true"});
  ASSERT_EQ(p.line.action, CommandLine::Action::kRun) << p.stderr_text;
  EXPECT_EQ(p.line.job.hostfile, hostfile);
  EXPECT_TRUE(p.line.job.timestamp_output);
  EXPECT_EQ(p.line.job.slots_per_host, 4);
  EXPECT_EQ(launcher::splitWords(p.line.job.mpi_args, "--mpi-args"),
            (std::vector<std::string>{"-mca", "btl", "self,tcp", "--oversubscribe"}));
  EXPECT_EQ(launcher::splitWords("a 'b c' \"d \\\"e\\\"\" f\\ g", "x"),
            (std::vector<std::string>{"a", "b c", "d \"e\"", "f g"}));
  EXPECT_EQ(parse({"-cb"}).line.action, CommandLine::Action::kCheckBuild);
  EXPECT_EQ(parse({"-v"}).line.exit_code, 0);
}

TEST(HorovodrunFlags, ElasticFlagsAndMinNpStandingInForAMissingNp) {
  const Parsed p = parse({"--min-np", "2", "--max-np", "6", "--host-discovery-script", "./hosts.sh", "--slots-per-host",
                          "3", "--elastic-timeout", "30", "--reset-limit", "4", "--blacklist-cooldown-range", "5",
                          "60", "python", "train.py"});
  ASSERT_EQ(p.line.action, CommandLine::Action::kRun) << p.stderr_text;
  const launcher::JobFlags& f = p.line.job;
  EXPECT_TRUE(f.elastic.enabled());
  EXPECT_EQ(f.np, 2);  // as horovodrun: the job starts with --min-np ranks
  EXPECT_EQ(f.elastic.max_np, 6);
  EXPECT_EQ(f.elastic.discovery_script, "./hosts.sh");
  EXPECT_EQ(f.slots_per_host, 3);
  EXPECT_EQ(f.elastic.timeout_seconds, 30);
  EXPECT_EQ(f.elastic.reset_limit, 4);
  EXPECT_EQ(f.elastic.cooldown_range, (std::vector<double>{5, 60}));
  EXPECT_EQ(f.command, (std::vector<std::string>{"python", "train.py"}));
  EXPECT_NE(parse({"--min-np", "3", "--max-np", "2", "true"}).stderr_text.find("--min-np 3 exceeds --max-np 2"),
            std::string::npos);
  EXPECT_FALSE(parse({"-np", "2", "true"}).line.job.elastic.enabled());
}

// Parameter servers in an elastic job: each generation gets its own (docs/parameter_servers.md);
// mpirun would start the ranks but not the servers.
TEST(HorovodrunFlags, ServersGoWithAnElasticJobButNotWithMpirun) {
  const Parsed elastic = parse({"--min-np", "2", "--max-np", "3", "--servers", "2", "--server-hosts", "c:2", "true"});
  ASSERT_EQ(elastic.line.action, CommandLine::Action::kRun) << elastic.stderr_text;
  EXPECT_TRUE(elastic.line.job.elastic.enabled());
  EXPECT_EQ(elastic.line.job.servers, 2);
  EXPECT_EQ(elastic.line.job.server_hosts, "c:2");
  const Parsed mpi = parse({"-np", "2", "--servers", "1", "--mpi", "true"});
  EXPECT_EQ(mpi.line.action, CommandLine::Action::kExit);
  EXPECT_NE(mpi.stderr_text.find("--servers and --server-hosts cannot be combined with --mpi"), std::string::npos)
      << mpi.stderr_text;
}

TEST(HorovodrunFlags, ElasticTimeoutFromHorovodsVariableWhenTheFlagIsNotGiven) {
  ::setenv("HOROVOD_ELASTIC_TIMEOUT", "45", 1);
  EXPECT_EQ(parse({"--min-np", "1", "true"}).line.job.elastic.timeout_seconds, 45);
  EXPECT_EQ(parse({"--min-np", "1", "--elastic-timeout", "7", "true"}).line.job.elastic.timeout_seconds, 7);
  ::setenv("HOROVOD_ELASTIC_TIMEOUT", "soon", 1);
  EXPECT_NE(parse({"--min-np", "1", "true"}).stderr_text.find("HOROVOD_ELASTIC_TIMEOUT 'soon'"), std::string::npos);
  ::unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  EXPECT_EQ(parse({"--min-np", "1", "true"}).line.job.elastic.timeout_seconds, 600);
  // Given to the workers with -x, it is the driver's too.
  EXPECT_EQ(parse({"--min-np", "1", "-x", "HORA_ELASTIC_TIMEOUT_SECONDS=12", "true"}).line.job.elastic.timeout_seconds, 12);
}

TEST(HorovodrunFlags, ConfigFileSetsHorovodrunsParametersAndTheCommandLineWins) {
  const std::string config = writeFile("hora_flags_config2.yaml",
                                       "params:\n"
                                       "  fusion_threshold_mb: 32\n"
                                       "  cycle_time_ms: 2\n"
                                       "  cache_capacity: 2048\n"
                                       "  hierarchical_allreduce: false\n"
                                       "  hierarchical_allgather: true\n"
                                       "timeline:\n"
                                       "  filename: /tmp/timeline.json\n"
                                       "  mark_cycles: true\n"
                                       "stall_check:\n"
                                       "  enabled: true\n"
                                       "  warning_time_seconds: 30\n"
                                       "  shutdown_time_seconds: 300\n"
                                       "library_options:\n"
                                       "  mpi_threads_disable: true\n"
                                       "  thread_affinity: '0,1'\n"
                                       "  gloo_timeout_seconds: 40\n"
                                       "logging:\n"
                                       "  level: INFO\n"
                                       "  with_timestamp: false\n");
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(knobsOf({"-np", "1", "--config-file", config, "--cache-capacity", "7", "--hierarchical-allreduce"}),
            (M{{"HORA_FUSION_THRESHOLD", "33554432"},
               {"HORA_CYCLE_TIME", "2.000000"},
               {"HORA_CACHE_CAPACITY", "7"},
               {"HORA_HIERARCHICAL_ALLREDUCE", "1"},
               {"HORA_HIERARCHICAL_ALLGATHER", "1"},
               {"HORA_TIMELINE", "/tmp/timeline.json"},
               {"HORA_TIMELINE_MARK_CYCLES", "1"},
               {"HORA_STALL_CHECK_TIME_SECONDS", "30"},
               {"HORA_STALL_SHUTDOWN_TIME_SECONDS", "300"},
               {"HORA_THREAD_AFFINITY", "0,1"},
               {"HORA_TIMEOUT_SECONDS", "40"},
               {"HORA_LOG_LEVEL", "INFO"},
               {"HORA_LOG_HIDE_TIME", "1"}}));
  const std::string mpi = writeFile("hora_flags_config3.yaml", "controller: MPI\n");
  EXPECT_TRUE(parse({"-np", "1", "--config-file", mpi, "true"}).line.job.mpi);

  const auto refusal = [](const std::string& yaml) {
    const std::string path = writeFile("hora_flags_bad.yaml", yaml);
    const Parsed p = parse({"-np", "1", "--config-file", path, "true"});
    EXPECT_EQ(p.line.exit_code, 2) << yaml;
    return p.stderr_text;
  };
  EXPECT_NE(refusal("params:\n  fusion_thresold_mb: 3\n").find("unknown key 'params.fusion_thresold_mb'"),
            std::string::npos);
  EXPECT_NE(refusal("params:\n  hierarchical_allreduce: maybe\n").find("must be true or false"), std::string::npos);
  EXPECT_NE(refusal("params: [1, 2\n").find("--config-file"), std::string::npos);
  EXPECT_NE(refusal("library_options:\n  num_nccl_streams: 2\n").find("--num-nccl-streams cannot apply"),
            std::string::npos);
}

TEST(HorovodrunFlags, HelpListsTheGroupsInHorovodrunsOrder) {
  std::string args[] = {"horarun", "--help"};
  char* argv[] = {args[0].data(), args[1].data()};
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(launcher::parseCommandLine(2, argv).exit_code, 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  size_t at = 0;
  for (const char* group : {"SSH arguments:", "tuneable parameter arguments:", "timeline arguments:",
                            "stall check arguments:", "library arguments:", "logging arguments:", "host arguments:",
                            "controller arguments:"}) {
    const size_t next = help.find(std::string("\n") + group, at);
    ASSERT_NE(next, std::string::npos) << group << " missing or out of horovodrun's order:\n" << help;
    at = next;
  }
  EXPECT_EQ(help.find("--stall-check "), std::string::npos) << "horovodrun hides --stall-check";
}

// Which variables of horarun's environment reach remote ranks (forwarded_env.h).
TEST(ForwardedEnvironment, EverythingButHostSpecificShellAndPerRankVariables) {
  for (auto name : {"PATH", "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "HORA_HIERARCHICAL_ALLREDUCE",
                    "HOROVOD_FUSION_THRESHOLD", "OMP_NUM_THREADS", "LANG", "TERM", "lower_case"})
    EXPECT_EQ(launcher::notForwarded(name), "") << name;
  for (auto name : {"HOSTNAME", "HOME", "USER", "SSH_AUTH_SOCK", "SSH_CONNECTION", "DISPLAY", "XDG_RUNTIME_DIR"})
    EXPECT_EQ(launcher::notForwarded(name), "specific to this host or login") << name;
  for (auto name : {"PWD", "OLDPWD", "SHLVL", "_", "BASH_FUNC_module%%"})
    EXPECT_NE(launcher::notForwarded(name), "") << name;
  for (auto name : {"HORA_SECRET", "HORA_RANK", "HOROVOD_RANK", "HORA_RENDEZVOUS_ADDR", "HOROVOD_SECRET_KEY"})
    EXPECT_EQ(launcher::notForwarded(name), "set by horarun for each rank") << name;
  EXPECT_EQ(launcher::notForwarded("CUDA_VISIBLE_DEVICES"), "chosen per host");
  EXPECT_EQ(launcher::notForwarded("1BAD"), "not a name a shell can export");
  EXPECT_EQ(launcher::notForwarded("A-B"), "not a name a shell can export");

  std::string entries[] = {"PATH=/venv/bin:/usr/bin", "HORA_SECRET=s3cret", "HOME=/root", "ODD=a=b\nc ü",
                           "NOEQUALS"};
  char* environ[] = {entries[0].data(), entries[1].data(), entries[2].data(), entries[3].data(), entries[4].data(),
                     nullptr};
  EXPECT_EQ(launcher::forwardedEnvironment(environ),
            (std::map<std::string, std::string>{{"PATH", "/venv/bin:/usr/bin"}, {"ODD", "a=b\nc ü"}}));
}

}  // namespace
}  // namespace hora::testing
