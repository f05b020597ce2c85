#include "launcher/flags.h"

#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <set>

#include "common/knobs.h"
#include "hora/errors.h"
#include "launcher/knob_flags.h"

namespace hora::launcher {
namespace {

// Note [horovodrun's flags]: horarun takes every flag of horovodrun (Horovod 0.28.1,
// horovod/runner/launch.py), in horovodrun's groups. Each is one of: a flag of horarun's own
// below; a knob flag (knob_flags.h); accepted with no effect because hora already behaves as the flag asks (kNoEffect); or refused,
// saying why it cannot apply (kRefused). tests/cpp/launcher/horovodrun_flags_test.cc holds horovodrun's
// list and checks each against this parser.
constexpr const char* kSsh = "SSH arguments";
constexpr const char* kTuneable = "tuneable parameter arguments";
constexpr const char* kStallCheck = "stall check arguments";
constexpr const char* kLibrary = "library arguments";
constexpr const char* kLogging = "logging arguments";
constexpr const char* kHosts = "host arguments";
constexpr const char* kController = "controller arguments";
constexpr const char* kElastic = "elastic arguments";

struct FixedFlag {
  const char* flag;
  bool takes_value;
  const char* group;  // "" hides it from --help, as horovodrun hides it
  const char* text;   // kNoEffect: the help; kRefused: why it cannot apply
};

constexpr FixedFlag kNoEffect[] = {
    {"--disable-cache", false, "Options",
     "Accepted; no effect: horarun keeps no cache of host checks, every run checks afresh"},
    {"--no-torus-allreduce", false, kTuneable, "Accepted; no effect: hora has no torus allreduce to disable"},
    {"--stall-check", false, "", "The stall check is on by default"},
    {"--mpi-threads-disable", false, kLibrary,
     "Accepted; no effect: hora calls no MPI, so it never asks MPI for threads"},
    {"--no-mpi-threads-disable", false, "", "Accepted; no effect: hora calls no MPI"},
    {"--gloo", false, kController,
     "Run with horarun's own launcher and store (the default; what horovodrun's Gloo mode does)"},
};

constexpr FixedFlag kRefused[] = {
    {"--torus-allreduce", false, kTuneable,
     "NCCL's 2D torus allreduce needs NCCL and GPUs; hora runs CPU collectives with no NCCL"},
    {"--num-nccl-streams", true, kLibrary, "hora has no NCCL, hence no NCCL streams (CPU collectives only)"},
    {"--jsrun", false, kController,
     "jsrun is IBM's launcher for LSF clusters; horarun starts ranks itself, with --mpi, or under srun"},
};

// The launcher's own flags (the knob flags are KnobFlagValues'), in two parts so that --help
// lists the groups in horovodrun's order: general and ssh flags, then the knob flags' groups
// (tuneable, timeline, stall check, library, logging), then hosts and controller.
void defineGeneralFlags(CLI::App& app, JobFlags& f) {
  app.add_option("-n,--num-proc", f.np, "Number of ranks to start (-np works too)");
  app.add_option("--servers", f.servers,
                 "Parameter server processes to start beside the ranks, one per host of the job in turn "
                 "(docs/parameter_servers.md)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--start-timeout", f.start_timeout,
                 "Seconds for every rank to start and reach the rendezvous store")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("-x,--export", f.exports,
                 "Set VAR=value (or pass VAR through) for every rank; repeatable. Every other variable of "
                 "this environment reaches every rank too, but host-specific ones (docs/launcher.md)")
      ->allow_extra_args(false);  // one value per -x: the command follows
  app.add_option("--grace-seconds", f.grace_seconds,
                 "After a rank fails, seconds between SIGTERM and SIGKILL for the others")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--output-filename", f.output_dir,
                 "Also write each rank's output to DIR/rank.<N>/stdout and DIR/rank.<N>/stderr");
  app.add_flag("--verbose", f.verbose, "Print what horarun does");
  app.add_option("-p,--ssh-port", f.ssh.port, "ssh port of the remote hosts")->check(CLI::Range(1, 65535))->group(kSsh);
  app.add_option("-i,--ssh-identity-file", f.ssh.identity_file, "ssh private key for the remote hosts")->group(kSsh);
}

void defineLaunchFlags(CLI::App& app, JobFlags& f) {
  app.add_flag("--prefix-output-with-timestamp", f.timestamp_output,
               "Prefix every forwarded line with the time (-prefix-timestamp works too)")
      ->group(kLogging);
  auto* hosts =
      app.add_option("-H,--hosts", f.hosts, "Hosts and their slots: host:slots,host:slots,...")->group(kHosts);
  app.add_option("--hostfile", f.hostfile,
                 "File of hosts, one per line: 'host slots=N' or 'host:N' (-hostfile works too)")
      ->excludes(hosts)
      ->group(kHosts);
  // --slots: horovodrun takes it as the abbreviation of --slots-per-host (argparse prefixes).
  app.add_option("--slots-per-host,--slots", f.slots_per_host, "Slots of every host given without a count (default 1)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(kHosts);
  app.add_option("--host-discovery-script", f.elastic.discovery_script,
                 "Elastic: a program printing the usable hosts, 'host' or 'host:slots' per line; run every second")
      ->group(kHosts);
  app.add_option("--server-hosts", f.server_hosts,
                 "Hosts for the parameter servers instead, as host:count,...: their own hosts or some of the "
                 "ranks'; --servers defaults to the counts' sum")
      ->group(kHosts);
  app.add_option("--min-np,--min-num-proc", f.elastic.min_np,
                 "Elastic: fewest ranks to train with; fewer for longer than --elastic-timeout ends the job (default -np)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(kElastic);
  app.add_option("--max-np,--max-num-proc", f.elastic.max_np, "Elastic: most ranks to train with (default: no limit)")
      ->check(CLI::Range(1, 1 << 20))
      ->group(kElastic);
  app.add_option("--elastic-timeout", f.elastic.timeout_seconds,
                 "Elastic: seconds to wait for --min-np ranks after the job shrank (default 600)")
      ->check(CLI::Range(1.0, 86400.0 * 365))
      ->group(kElastic);
  app.add_option("--reset-limit", f.elastic.reset_limit,
                 "Elastic: most times the job may re-form after a failure or a host change (default: no limit)")
      ->check(CLI::Range(0, 1 << 30))
      ->group(kElastic);
  app.add_option("--blacklist-cooldown-range", f.elastic.cooldown_range,
                 "Elastic: MIN MAX seconds a failed host stays blacklisted, drawn at random (default: for good)")
      ->expected(2)
      ->allow_extra_args(false)  // two values: the command follows
      ->check(CLI::Range(0.0, 86400.0 * 365))
      ->group(kElastic);
  auto* mpi =
      app.add_flag("--mpi", f.mpi, "Start the ranks with mpirun (OpenMPI or MPICH) instead of horarun's own launcher")
          ->group(kController);
  app.add_option("--mpi-args", f.mpi_args, "More arguments for mpirun, as one string (with --mpi)")
      ->needs(mpi)
      ->group(kLibrary);
  app.add_option("--binding-args", f.binding_args,
                 "mpirun's process binding, replacing horarun's '--bind-to none --map-by slot' (with --mpi)")
      ->needs(mpi)
      ->group(kLibrary);
}

// horovodrun's single-dash long flags, which CLI11 cannot declare, rewritten among horarun's own
// flags, never in the worker command, which starts at the first word that is neither a flag nor
// a flag's value.
std::vector<std::string> normalizeArgs(const CLI::App& app, std::vector<std::string> args) {
  static const std::pair<const char*, const char*> kSingleDash[] = {
      {"-np", "--num-proc"}, {"-cb", "--check-build"}, {"-hostfile", "--hostfile"},
      {"-prefix-timestamp", "--prefix-output-with-timestamp"}};
  std::set<std::string> takes_value;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_min() == 0) continue;
    for (const auto& n : o->get_lnames()) takes_value.insert("--" + n);
    for (const auto& n : o->get_snames()) takes_value.insert("-" + n);
  }
  for (size_t i = 1; i < args.size(); ++i) {
    for (const auto& [from, to] : kSingleDash)
      if (args[i] == from) args[i] = to;
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
  const ElasticFlags& e = f.elastic;
  if (e.enabled() && f.mpi) return "--mpi cannot start an elastic job (--min-np, --max-np, --host-discovery-script)";
  // mpirun starts the ranks only; an elastic job's driver starts each generation's servers.
  if ((f.servers > 0 || !f.server_hosts.empty()) && f.mpi)
    return "--servers and --server-hosts cannot be combined with --mpi yet: mpirun would not start the servers";
  if (e.max_np > 0 && e.min_np > e.max_np)
    return "--min-np " + std::to_string(e.min_np) + " exceeds --max-np " + std::to_string(e.max_np);
  if (e.cooldown_range.size() == 2 && e.cooldown_range[0] > e.cooldown_range[1])
    return "--blacklist-cooldown-range: MIN " + std::to_string(e.cooldown_range[0]) + " exceeds MAX " +
           std::to_string(e.cooldown_range[1]);
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

// One key of horovodrun's config file: its section and name, and the flag it stands for. A
// boolean key gives `flag` when true and `flag_if_false` when false; a flag given on the command
// line (either of a pair) wins over the file.
struct ConfigKey {
  const char* section;
  const char* key;
  const char* flag;
  const char* flag_if_false;  // nullptr: the key takes a value for `flag`
};

constexpr ConfigKey kConfigKeys[] = {
    {"params", "fusion_threshold_mb", "--fusion-threshold-mb", nullptr},
    {"params", "cycle_time_ms", "--cycle-time-ms", nullptr},
    {"params", "cache_capacity", "--cache-capacity", nullptr},
    {"params", "hierarchical_allreduce", "--hierarchical-allreduce", "--no-hierarchical-allreduce"},
    {"params", "hierarchical_allgather", "--hierarchical-allgather", "--no-hierarchical-allgather"},
    {"params", "torus_allreduce", "--torus-allreduce", "--no-torus-allreduce"},
    {"autotune", "enabled", "--autotune", "--no-autotune"},
    {"autotune", "log_file", "--autotune-log-file", nullptr},
    {"autotune", "warmup_samples", "--autotune-warmup-samples", nullptr},
    {"autotune", "steps_per_sample", "--autotune-steps-per-sample", nullptr},
    {"autotune", "bayes_opt_max_samples", "--autotune-bayes-opt-max-samples", nullptr},
    {"autotune", "gaussian_process_noise", "--autotune-gaussian-process-noise", nullptr},
    {"timeline", "filename", "--timeline-filename", nullptr},
    {"timeline", "mark_cycles", "--timeline-mark-cycles", "--no-timeline-mark-cycles"},
    {"stall_check", "enabled", "--stall-check", "--no-stall-check"},
    {"stall_check", "warning_time_seconds", "--stall-check-warning-time-seconds", nullptr},
    {"stall_check", "shutdown_time_seconds", "--stall-check-shutdown-time-seconds", nullptr},
    {"library_options", "mpi_threads_disable", "--mpi-threads-disable", "--no-mpi-threads-disable"},
    {"library_options", "num_nccl_streams", "--num-nccl-streams", nullptr},
    {"library_options", "thread_affinity", "--thread-affinity", nullptr},
    {"library_options", "gloo_timeout_seconds", "--gloo-timeout-seconds", nullptr},
    {"logging", "level", "--log-level", nullptr},
    {"logging", "with_timestamp", "--log-with-timestamp", "--log-without-timestamp"},
};

bool givenOnCommandLine(const CLI::App& app, const char* flag) {
  const CLI::Option* o = flag ? app.get_option_no_throw(flag) : nullptr;
  return o && o->count() > 0;
}

// The flags horovodrun's YAML config file stands for, less those the command line gives.
// InvalidArgumentError naming the file and the key it cannot take.
std::vector<std::string> configFileArgs(const CLI::App& app, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw InvalidArgumentError("--config-file " + path + ": " + e.what());
  }
  const auto bad = [&](const std::string& why) { throw InvalidArgumentError("--config-file " + path + ": " + why); };
  if (root.IsNull()) return {};
  if (!root.IsMap()) bad("expected a mapping of sections (params, timeline, ...)");
  std::vector<std::string> args;
  for (const auto& section : root) {
    const std::string name = section.first.as<std::string>();
    if (name == "controller") {
      const std::string c = section.second.as<std::string>();
      std::string lower(c.size(), ' ');
      std::transform(c.begin(), c.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (lower != "gloo" && lower != "mpi") bad("controller '" + c + "': expected gloo or mpi");
      if (!givenOnCommandLine(app, "--gloo") && !givenOnCommandLine(app, "--mpi")) args.push_back("--" + lower);
      continue;
    }
    if (!section.second.IsMap()) bad("section '" + name + "' is not a mapping");
    for (const auto& entry : section.second) {
      const std::string key = entry.first.as<std::string>();
      const ConfigKey* k = nullptr;
      for (const auto& c : kConfigKeys)
        if (name == c.section && key == c.key) k = &c;
      if (!k) bad("unknown key '" + name + "." + key + "' (horovodrun's keys: params, timeline, stall_check, ...)");
      if (givenOnCommandLine(app, k->flag) || givenOnCommandLine(app, k->flag_if_false)) continue;
      const char* flag = k->flag;
      std::string value;
      try {
        if (k->flag_if_false && !entry.second.as<bool>()) flag = k->flag_if_false;
        if (!k->flag_if_false) value = entry.second.as<std::string>();
      } catch (const YAML::Exception&) {
        bad("'" + name + "." + key + "' must be " + (k->flag_if_false ? "true or false" : "a value"));
      }
      if (!app.get_option_no_throw(flag))
        bad("'" + name + "." + key + "' stands for " + flag + ", which this horarun does not have");
      args.push_back(flag);
      if (!k->flag_if_false) args.push_back(value);
    }
  }
  return args;
}

// What parsing fills besides the job's flags.
struct Parsed {
  CommandLine c;
  KnobFlagValues knob_flags;
  bool knobs_markdown = false, check_build = false;
  std::string config_file;
  std::vector<CLI::Option*> refused;  // kRefused's, in its order
};

// Every flag of horarun's command line, bound to `p`.
void defineFlags(CLI::App& app, Parsed& p) {
  app.footer("Every tuning knob below can be set for every rank with --knob NAME=VALUE (docs/knobs.md).\n"
             "Environment variables read by every rank:\n" + common::knobsMarkdown());
  app.set_version_flag("-v,--version", std::string("horarun (hora) ") + kVersion);
  app.add_flag("--check-build", p.check_build, "Print what this build of hora has and exit (-cb works too)");
  app.add_flag("--knobs-markdown", p.knobs_markdown, "Print the table of HORA_* variables (docs/knobs.md) and exit");
  app.add_option("--config-file", p.config_file,
                 "horovodrun's YAML file of parameters (params, timeline, stall_check, library_options, "
                 "logging, controller); flags on the command line win")
      ->check(CLI::ExistingFile);
  defineGeneralFlags(app, p.c.job);
  p.knob_flags.define(app);
  defineLaunchFlags(app, p.c.job);
  for (const auto& f : kNoEffect) {
    if (f.takes_value) continue;
    app.add_flag(f.flag)->description(f.text)->group(f.group);
  }
  for (const auto& f : kRefused) {
    CLI::Option* o = f.takes_value ? app.add_option(f.flag) : app.add_flag(f.flag);
    p.refused.push_back(o->description(std::string("Refused: ") + f.text)->group(f.group));
  }
  app.get_option("--gloo")->excludes("--mpi");
  app.prefix_command();  // the first positional and everything after it is the command
}

// CLI11's parse of `config_args` and then `args`; false when it refused them or answered
// (--help, --version), which it reported: `exit_code` is then horarun's exit code.
bool parseWithCli11(CLI::App& app, std::vector<std::string> args, const std::vector<std::string>& config_args,
                    int& exit_code) {
  try {
    args.insert(args.begin(), config_args.begin(), config_args.end());
    args.insert(args.begin(), "horarun");
    args = normalizeArgs(app, std::move(args));
    args.erase(args.begin());                // the program name
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app.parse(args);
    return true;
  } catch (const CLI::ParseError& e) {
    // --help and --version end with 0; every refusal with 2, as horarun's own (README).
    exit_code = app.exit(e) == 0 ? 0 : 2;
    return false;
  }
}

// As horovodrun's driver: without --elastic-timeout, HORA_ELASTIC_TIMEOUT_SECONDS (or Horovod's
// name) of horarun's environment, where a -x given to the workers counts as horarun's own. The
// refusal, or "".
std::string takeElasticTimeoutFromEnvironment(JobFlags& job) {
  constexpr const char* kKnob = "HORA_ELASTIC_TIMEOUT_SECONDS";
  const common::Env env = common::Env::fromProcess().overriddenBy(workerEnvironment(job));
  const std::string value = env.getString(kKnob);
  if (!env.isSet(kKnob) || value.empty()) return "";
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (*end != '\0' || !(seconds >= 1) || seconds > 86400.0 * 365)
    return std::string(kKnob) + " / " + std::string(common::knob(kKnob).horovod_alias) + " '" + value +
           "' is not a number of seconds for --elastic-timeout";
  job.elastic.timeout_seconds = seconds;
  return "";
}

// The job's flags checked, its knobs and words taken: the refusal, or "".
std::string finishJob(JobFlags& job, const KnobFlagValues& knob_flags) {
  if (std::string why = refusal(job); !why.empty()) return why;
  try {
    job.knobs = knob_flags.knobs();
    splitWords(job.mpi_args, "--mpi-args");
    splitWords(job.binding_args, "--binding-args");
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  if (auto it = job.knobs.find("HORA_IFACE"); it != job.knobs.end()) job.network_interface = it->second;
  return "";
}

// `args` without the program name; `config_args` go first, so that a flag of the file counts
// like one given before the command line's.
CommandLine parseArgs(const std::vector<std::string>& args, const std::vector<std::string>& config_args) {
  CLI::App app{"horarun: run a hora job of N ranks on this host or on several (over ssh).\n"};
  Parsed p;
  defineFlags(app, p);
  if (int code = 0; !parseWithCli11(app, args, config_args, code)) return exitWith(code);
  if (config_args.empty() && !p.config_file.empty()) {
    try {
      const std::vector<std::string> from_file = configFileArgs(app, p.config_file);
      if (!from_file.empty()) return parseArgs(args, from_file);
    } catch (const InvalidArgumentError& e) {
      return refuse(e.what());
    }
  }
  for (size_t i = 0; i < p.refused.size(); ++i)
    if (p.refused[i]->count() > 0) return refuse(std::string(kRefused[i].flag) + " cannot apply: " + kRefused[i].text);
  if (p.check_build) p.c.action = CommandLine::Action::kCheckBuild;
  if (p.knobs_markdown) p.c.action = CommandLine::Action::kPrintKnobs;
  if (p.knobs_markdown || p.check_build) return p.c;
  JobFlags& job = p.c.job;
  job.command = app.remaining();
  // horovodrun's elastic mode starts with --min-np ranks when -np is not given.
  if (job.np == 0 && job.elastic.min_np > 0) job.np = job.elastic.min_np;
  if (app.get_option("--elastic-timeout")->count() == 0)
    if (std::string why = takeElasticTimeoutFromEnvironment(job); !why.empty()) return refuse(why);
  if (std::string why = finishJob(job, p.knob_flags); !why.empty()) return refuse(why);
  return p.c;
}

}  // namespace

CommandLine parseCommandLine(int argc, char** argv) {
  return parseArgs(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), {});
}

std::vector<std::string> splitWords(const std::string& text, const std::string& flag) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quote) {
      if (ch == quote) quote = 0;
      else if (ch == '\\' && quote == '"' && i + 1 < text.size()) word += text[++i];
      else word += ch;
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      in_word = true;
    } else if (ch == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (std::isspace(static_cast<unsigned char>(ch))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += ch;
      in_word = true;
    }
  }
  if (quote) throw InvalidArgumentError(flag + " '" + text + "': unclosed " + std::string(1, quote));
  if (in_word) words.push_back(word);
  return words;
}

std::map<std::string, std::string> workerEnvironment(const JobFlags& job) {
  std::map<std::string, std::string> env = job.knobs;
  for (const auto& x : job.exports) {
    const auto eq = x.find('=');
    if (eq == std::string::npos) {
      if (auto v = common::processVariable(x)) env[x] = *v;
    } else {
      env[x.substr(0, eq)] = x.substr(eq + 1);
    }
  }
  // As horovodrun does: a rank's Python prints reach horarun (and the terminal) as they happen,
  // not when a pipe's buffer fills; a value the user chose stands.
  if (!env.count("PYTHONUNBUFFERED") && !common::processVariable("PYTHONUNBUFFERED")) env["PYTHONUNBUFFERED"] = "1";
  return env;
}

}  // namespace hora::launcher
