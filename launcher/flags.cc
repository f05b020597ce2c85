#include "launcher/flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>

#include "common/knobs.h"
#include "hora/errors.h"
#include "launcher/knob_flags.h"

namespace hora::launcher {
namespace {

// The launcher's own flags (the knob flags are KnobFlagValues').
void defineJobFlags(CLI::App& app, JobFlags& f) {
  app.add_option("-n,--num-proc", f.np, "Number of ranks to start (-np works too)");
  auto* hosts = app.add_option("-H,--hosts", f.hosts, "Hosts and their slots: host:slots,host:slots,...");
  app.add_option("--hostfile", f.hostfile, "File of hosts, one per line: 'host slots=N' or 'host:N'")
      ->excludes(hosts);
  app.add_option("-p,--ssh-port", f.ssh.port, "ssh port of the remote hosts")->check(CLI::Range(1, 65535));
  app.add_option("-i,--ssh-identity-file", f.ssh.identity_file, "ssh private key for the remote hosts");
  app.add_option("--start-timeout", f.start_timeout,
                 "Seconds for every rank to start and reach the rendezvous store")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("-x,--export", f.exports, "Set VAR=value (or pass VAR through) for every rank; repeatable")
      ->allow_extra_args(false);  // one value per -x: the command follows
  app.add_option("--grace-seconds", f.grace_seconds,
                 "After a rank fails, seconds between SIGTERM and SIGKILL for the others")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--output-filename", f.output_dir,
                 "Also write each rank's output to DIR/rank.<N>/stdout and DIR/rank.<N>/stderr");
  app.add_flag("--verbose", f.verbose, "Print what horarun does");
  app.add_flag("--mpi", f.mpi, "Start the ranks with mpirun (OpenMPI or MPICH) instead of horarun's own launcher");
}

// Horovod spells the rank count "-np", which CLI11 cannot declare (one dash, two letters).
// Rewrite it to --num-proc among horarun's own flags, never in the worker command, which starts
// at the first word that is neither a flag nor a flag's value.
std::vector<std::string> normalizeArgs(const CLI::App& app, int argc, char** argv) {
  std::set<std::string> takes_value;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_min() == 0) continue;
    for (const auto& n : o->get_lnames()) takes_value.insert("--" + n);
    for (const auto& n : o->get_snames()) takes_value.insert("-" + n);
  }
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "-np") args[i] = "--num-proc";
    if (args[i].empty() || args[i][0] != '-') break;
    if (args[i].find('=') == std::string::npos && takes_value.count(args[i])) ++i;
  }
  return args;
}

// Why a parsed job cannot run, or "" when it can.
std::string refusal(const JobFlags& f) {
  const auto& command = f.command;
  if (!command.empty() && command[0].size() > 1 && command[0][0] == '-')
    return "unknown flag " + command[0] + "; see horarun --help";
  if (f.np < 1) return "-np must be at least 1 (got " + std::to_string(f.np) + ")";
  if (command.empty()) return "no command given; usage: horarun -np N [-H host:slots,...] command [args...]";
  return "";
}

CommandLine exitWith(int code) {
  CommandLine c;
  c.action = CommandLine::Action::kExit;
  c.exit_code = code;
  return c;
}

CommandLine refuse(const std::string& why) {
  std::cerr << "horarun: " << why << "\n";
  return exitWith(2);
}

}  // namespace

CommandLine parseCommandLine(int argc, char** argv) {
  CLI::App app{"horarun: run a hora job of N ranks on this host or on several (over ssh).\n"};
  app.footer("Every tuning knob below can be set for every rank with --knob NAME=VALUE (docs/knobs.md).\n"
             "Environment variables read by every rank:\n" + common::knobsMarkdown());
  CommandLine c;
  KnobFlagValues knob_flags;
  defineJobFlags(app, c.job);
  knob_flags.define(app);
  bool knobs_markdown = false, check_build = false;
  app.add_flag("--check-build", check_build, "Print what this build of hora has and exit");
  app.add_flag("--knobs-markdown", knobs_markdown, "Print the table of HORA_* variables (docs/knobs.md) and exit");
  app.set_version_flag("--version", std::string("horarun (hora) ") + kVersion);
  app.prefix_command();  // the first positional and everything after it is the command
  try {
    auto args = normalizeArgs(app, argc, argv);
    args.erase(args.begin());                // the program name
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return exitWith(app.exit(e));
  }
  if (check_build) c.action = CommandLine::Action::kCheckBuild;
  if (knobs_markdown) c.action = CommandLine::Action::kPrintKnobs;
  if (knobs_markdown || check_build) return c;
  c.job.command = app.remaining();
  if (const std::string why = refusal(c.job); !why.empty()) return refuse(why);
  try {
    c.job.knobs = knob_flags.knobs();
  } catch (const InvalidArgumentError& e) {
    return refuse(e.what());
  }
  if (auto it = c.job.knobs.find("HORA_IFACE"); it != c.job.knobs.end()) c.job.network_interface = it->second;
  return c;
}

std::map<std::string, std::string> workerEnvironment(const JobFlags& job) {
  std::map<std::string, std::string> env = job.knobs;
  for (const auto& x : job.exports) {
    const auto eq = x.find('=');
    if (eq == std::string::npos) {
      if (const char* v = std::getenv(x.c_str())) env[x] = v;
    } else {
      env[x.substr(0, eq)] = x.substr(eq + 1);
    }
  }
  return env;
}

}  // namespace hora::launcher
