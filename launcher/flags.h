// horarun's command line: its flags, their checks, and the variables every rank gets from them.
//
// The flags that set a knob are in knob_flags.h; these are the launcher's own (ranks, hosts,
// ssh, timeouts, output) and the command to run.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/remote.h"

namespace hora::launcher {

inline constexpr const char* kVersion = "0.1.0";

// horovodrun's elastic flags (docs/elastic.md); any of min_np, max_np, discovery_script makes
// the job elastic, as in horovodrun.
struct ElasticFlags {
  int min_np = 0;  // 0: -np
  int max_np = 0;  // 0: no limit
  std::string discovery_script;
  double timeout_seconds = 600;
  int reset_limit = -1;  // -1: none
  std::vector<double> cooldown_range;  // empty: a failed host stays blacklisted; else {min, max} seconds
  bool enabled() const { return min_np > 0 || max_np > 0 || !discovery_script.empty(); }
};

struct JobFlags {
  int np = 0;
  int servers = 0;  // --servers: parameter server processes beside the ranks
  std::string server_hosts;  // --server-hosts: where they run, "host:count,..." (empty: the ranks' hosts)
  std::string hosts, hostfile;
  SshOptions ssh;
  std::string network_interface;  // HORA_IFACE, from --network-interface or --knob HORA_IFACE
  double start_timeout = 60;
  double grace_seconds = 3;
  std::string output_dir;
  std::vector<std::string> exports;          // of -x: VAR=value, or VAR to pass through
  std::map<std::string, std::string> knobs;  // HORA_* tuning knobs, from the knob flags
  bool verbose = false;
  bool mpi = false;
  int slots_per_host = 0;         // slots of a host given without a count (0: one, as horovodrun)
  bool timestamp_output = false;  // --prefix-output-with-timestamp
  std::string mpi_args;           // --mpi-args: more arguments for mpirun (with --mpi)
  std::string binding_args;       // --binding-args: mpirun's binding instead of horarun's (with --mpi)
  ElasticFlags elastic;
  std::vector<std::string> command;  // the program and its arguments
};

// What horarun was asked to do.
struct CommandLine {
  enum class Action { kRun, kPrintKnobs, kCheckBuild, kExit };
  Action action = Action::kRun;
  int exit_code = 0;  // kExit: already reported (--help, --version, or a refusal on stderr)
  JobFlags job;       // kRun
};

// Parses horarun's arguments. A refused flag or value is reported on stderr, naming it, and
// gives kExit with code 2 (or CLI11's code for what CLI11 itself refuses). Every flag of
// horovodrun's (flags.cc, Note [horovodrun's flags]) is accepted with its meaning or refused
// saying why it cannot apply; --config-file reads horovodrun's YAML, the command line winning.
CommandLine parseCommandLine(int argc, char** argv);

// "a 'b c' \"d\"" -> {a, b c, d}: the words of --mpi-args and --binding-args, as a shell splits
// them (quotes, backslashes; no expansion). InvalidArgumentError on an unclosed quote.
std::vector<std::string> splitWords(const std::string& text, const std::string& flag);

// The variables every rank gets besides those horarun sets per rank: the knobs, then the -x
// variables (which win over a knob of the same name), and PYTHONUNBUFFERED=1 unless set. Remote
// ranks also get forwardedEnvironment() (forwarded_env.h) beneath these.
std::map<std::string, std::string> workerEnvironment(const JobFlags& job);

}  // namespace hora::launcher
