// horarun: starts the ranks of a hora job, locally and over ssh, and serves their rendezvous
// store.
//
//   horarun -np 4 python train.py --epochs 3
//   horarun -np 8 -H a:4,b:4 python train.py
//
// The job secret is generated here and reaches the workers only through their environment
// (local) or their stdin (ssh), never a command line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "common/crypto.h"
#include "common/deadline.h"
#include "common/knobs.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "launcher/hosts.h"
#include "launcher/remote.h"
#include "launcher/worker_set.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

namespace {

constexpr const char* kVersion = "0.1.0";

std::string localHostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
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

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw hora::InvalidArgumentError("--hostfile " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Flags {
  int np = 0;
  std::string hosts, hostfile;
  hora::launcher::SshOptions ssh;
  std::string network_interface;
  double start_timeout = 60;
  double grace_seconds = 3;
  std::string output_dir;
  std::vector<std::string> exports;
  // Knob flags: each sets its HORA_* variable for every rank.
  std::map<std::string, std::string> knobs;
  bool verbose = false;
  bool mpi = false;
};

// --mpi: hand the job to mpirun (OpenMPI's or MPICH's, whichever `mpirun` is). The ranks then
// find each other as any mpirun-started hora job does (src/common/foreign_launch.h); the job
// secret and every -x / knob variable travel in the environment (named, not valued, on mpirun's
// command line). Returns only when mpirun cannot be executed.
int execMpirun(const Flags& f, const std::vector<hora::launcher::HostSlots>& hosts, bool all_local,
               const std::string& rank0_address, std::map<std::string, std::string> env,
               const std::vector<std::string>& command) {
  std::string version;
  if (FILE* p = ::popen("mpirun --version 2>&1", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p)) version += buf;
    ::pclose(p);
  }
  const bool openmpi = version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos;
  const bool hydra = version.find("HYDRA") != std::string::npos;
  if (!openmpi && !hydra) {
    std::cerr << "horarun: --mpi needs OpenMPI's or MPICH's mpirun on PATH; `mpirun --version` said: "
              << (version.empty() ? "nothing (not found)" : version) << "\n";
    return 127;
  }
  env["HORA_SECRET"] = hora::common::randomSecret();
  if (!all_local && !env.count("HORA_RENDEZVOUS_ADDR")) env["HORA_RENDEZVOUS_ADDR"] = rank0_address;
  std::string host_list, names;
  for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(f.np)};
  for (const auto& [k, v] : env) {
    ::setenv(k.c_str(), v.c_str(), 1);
    names += (names.empty() ? "" : ",") + k;
    if (openmpi) argv.insert(argv.end(), {"-x", k});
  }
  if (openmpi) {
    argv.insert(argv.end(), {"--bind-to", "none", "--map-by", "slot"});
    if (!f.hosts.empty() || !f.hostfile.empty()) argv.insert(argv.end(), {"-H", host_list});
    std::string rsh;
    if (f.ssh.port > 0) rsh += "-p " + std::to_string(f.ssh.port);
    if (!f.ssh.identity_file.empty()) rsh += (rsh.empty() ? "" : " ") + std::string("-i ") + f.ssh.identity_file;
    if (!rsh.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rsh});
    if (!f.network_interface.empty()) argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", f.network_interface});
  } else {
    argv.insert(argv.end(), {"-genvlist", names});
    if (!f.hosts.empty() || !f.hostfile.empty()) argv.insert(argv.end(), {"-hosts", host_list});
  }
  argv.insert(argv.end(), command.begin(), command.end());
  if (f.verbose) {
    std::cerr << "horarun:";
    for (const auto& a : argv) std::cerr << " " << a;
    std::cerr << "\n";
  }
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execvp("mpirun", raw.data());
  std::cerr << "horarun: cannot execute mpirun: " << std::strerror(errno) << "\n";
  return 127;
}

void printBuild() {
  std::cout << "hora " << kVersion << "\n"
            << "  transports:   [x] tcp  [x] shared memory (between ranks on one host)\n"
            << "  MPI:          [ ] not linked; ranks started by mpirun or srun find each other through the\n"
            << "                    rendezvous store (see README, \"Without horarun\")\n"
            << "  frontends:    [x] C++ (hora::hora)  [x] C ABI (hora/c_api.h); PyTorch (hora.torch) and\n"
            << "                    libtorch (hora::torch) where this build found torch\n"
            << "  launcher:     [x] local  [x] ssh\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"horarun: run a hora job of N ranks on this host or on several (over ssh).\n"};
  app.footer("Environment variables read by every rank:\n" + hora::common::knobsMarkdown());
  Flags f;
  app.add_option("-n,--num-proc", f.np, "Number of ranks to start (-np works too)");
  auto* hosts = app.add_option("-H,--hosts", f.hosts, "Hosts and their slots: host:slots,host:slots,...");
  app.add_option("--hostfile", f.hostfile, "File of hosts, one per line: 'host slots=N' or 'host:N'")
      ->excludes(hosts);
  app.add_option("-p,--ssh-port", f.ssh.port, "ssh port of the remote hosts")->check(CLI::Range(1, 65535));
  app.add_option("-i,--ssh-identity-file", f.ssh.identity_file, "ssh private key for the remote hosts");
  app.add_option("--network-interface", f.network_interface,
                 "Interface whose address the ranks use to reach the store and each other (HORA_IFACE)");
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
  // Knob flags (horovodrun's names), each a shorthand for an environment variable.
  std::string timeline, log_level;
  double fusion_mb = -1, cycle_ms = -1;
  int cache_capacity = -1;
  bool mark_cycles = false, no_stall_check = false, hierarchical = false, hierarchical_allgather = false;
  app.add_option("--timeline-filename", timeline, "Write a Chrome trace of the engine (HORA_TIMELINE)");
  app.add_flag("--timeline-mark-cycles", mark_cycles, "Mark engine cycles in the timeline");
  app.add_option("--fusion-threshold-mb", fusion_mb, "Tensor fusion buffer size in MiB (HORA_FUSION_THRESHOLD)")
      ->check(CLI::Range(0.0, 65536.0));
  app.add_option("--cycle-time-ms", cycle_ms, "Engine cycle time in ms (HORA_CYCLE_TIME)")
      ->check(CLI::Range(0.0, 10000.0));
  app.add_option("--cache-capacity", cache_capacity, "Response cache capacity (HORA_CACHE_CAPACITY)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--no-stall-check", no_stall_check, "Disable the stall inspector's warnings");
  app.add_flag("--hierarchical-allreduce", hierarchical,
               "Allreduce within each host, then among hosts, whatever the size (HORA_HIERARCHICAL_ALLREDUCE=1)");
  app.add_flag("--hierarchical-allgather", hierarchical_allgather,
               "Allgather among hosts, then within each host (HORA_HIERARCHICAL_ALLGATHER=1; auto does so too)");
  app.add_option("--log-level", log_level, "trace, debug, info, warning, error (HORA_LOG_LEVEL)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warning", "warn", "error", "critical", "off"}));
  app.add_flag("--verbose", f.verbose, "Print what horarun does");
  app.add_flag("--mpi", f.mpi, "Start the ranks with mpirun (OpenMPI or MPICH) instead of horarun's own launcher");
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
    return app.exit(e);
  }
  if (knobs_markdown) {
    std::cout << "# Environment variables\n\nGenerated by `horarun --knobs-markdown` from the knob "
                 "registry (src/common/knobs.cc).\n\n"
              << hora::common::knobsMarkdown();
    return 0;
  }
  if (check_build) {
    printBuild();
    return 0;
  }
  const std::vector<std::string> command = app.remaining();
  if (!command.empty() && command[0].size() > 1 && command[0][0] == '-') {
    std::cerr << "horarun: unknown flag " << command[0] << "; see horarun --help\n";
    return 2;
  }
  if (f.np < 1) {
    std::cerr << "horarun: -np must be at least 1 (got " << f.np << ")\n";
    return 2;
  }
  if (command.empty()) {
    std::cerr << "horarun: no command given; usage: horarun -np N [-H host:slots,...] command [args...]\n";
    return 2;
  }
  if (!timeline.empty()) f.knobs["HORA_TIMELINE"] = timeline;
  if (mark_cycles) f.knobs["HORA_TIMELINE_MARK_CYCLES"] = "1";
  if (fusion_mb >= 0) f.knobs["HORA_FUSION_THRESHOLD"] = std::to_string(static_cast<int64_t>(fusion_mb * 1048576));
  if (cycle_ms >= 0) f.knobs["HORA_CYCLE_TIME"] = std::to_string(cycle_ms);
  if (cache_capacity >= 0) f.knobs["HORA_CACHE_CAPACITY"] = std::to_string(cache_capacity);
  if (no_stall_check) f.knobs["HORA_STALL_CHECK_TIME_SECONDS"] = "0";
  if (hierarchical) f.knobs["HORA_HIERARCHICAL_ALLREDUCE"] = "1";
  if (hierarchical_allgather) f.knobs["HORA_HIERARCHICAL_ALLGATHER"] = "1";
  if (!log_level.empty()) f.knobs["HORA_LOG_LEVEL"] = log_level;
  if (!f.network_interface.empty()) f.knobs["HORA_IFACE"] = f.network_interface;

  std::map<std::string, std::string> extra_env = f.knobs;
  for (const auto& x : f.exports) {
    const auto eq = x.find('=');
    if (eq == std::string::npos) {
      if (const char* v = std::getenv(x.c_str())) extra_env[x] = v;
    } else {
      extra_env[x.substr(0, eq)] = x.substr(eq + 1);
    }
  }

  try {
    using namespace hora::launcher;
    std::vector<HostSlots> host_list = {{localHostname(), f.np}};
    if (!f.hosts.empty()) host_list = parseHostList(f.hosts);
    if (!f.hostfile.empty()) host_list = parseHostfile(readFile(f.hostfile), f.hostfile);
    const std::vector<Placement> placements = placeRanks(host_list, f.np);
    std::map<std::string, bool> local;
    std::string first_remote;
    for (const auto& p : placements) {
      if (local.count(p.host)) continue;
      local[p.host] = isLocalHost(p.host);
      if (!local[p.host] && first_remote.empty()) first_remote = p.host;
    }
    // The store listens where every host can reach it: loopback for a local job, else our
    // address on the route to the remote hosts (or on --network-interface).
    std::string store_host = "127.0.0.1";
    if (!f.network_interface.empty()) store_host = hora::common::interfaceAddress(f.network_interface);
    else if (!first_remote.empty()) store_host = addressToward(first_remote);

    if (f.mpi) {
      // Without horarun's store, rank 0 (on the first host) serves it.
      const std::string rank0 = local[placements[0].host] ? store_host : placements[0].host;
      return execMpirun(f, host_list, first_remote.empty(), rank0, extra_env, command);
    }

    const std::string secret = hora::common::randomSecret();
    hora::rendezvous::TcpStoreServer store(store_host, 0, secret);
    if (f.verbose)
      std::cerr << "horarun: rendezvous store on " << store_host << ":" << store.port() << ", starting " << f.np
                << " ranks on " << local.size() << " host(s): " << command[0] << "\n";
    installForwardingSignalHandlers();
    WorkerSet workers(std::chrono::milliseconds(static_cast<int64_t>(f.grace_seconds * 1000)), f.output_dir);
    const std::string cwd = std::filesystem::current_path().string();
    const auto started_at = std::chrono::steady_clock::now();
    for (const auto& p : placements) {
      WorkerSpec spec;
      spec.rank = p.rank;
      spec.host = p.host;
      std::map<std::string, std::string> env = extra_env;
      env["HORA_RANK"] = std::to_string(p.rank);
      env["HORA_SIZE"] = std::to_string(f.np);
      env["HORA_LOCAL_RANK"] = std::to_string(p.local_rank);
      env["HORA_LOCAL_SIZE"] = std::to_string(p.local_size);
      env["HORA_CROSS_RANK"] = std::to_string(p.cross_rank);
      env["HORA_CROSS_SIZE"] = std::to_string(p.cross_size);
      env["HORA_HOSTNAME"] = p.host;
      env["HORA_RENDEZVOUS_ADDR"] = store_host;
      env["HORA_RENDEZVOUS_PORT"] = std::to_string(store.port());
      if (local[p.host]) {
        env["HORA_SECRET"] = secret;
        spec.argv = command;
        spec.env = std::move(env);
      } else {
        f.ssh.connect_timeout = std::chrono::seconds(static_cast<int64_t>(f.start_timeout));
        spec.argv = sshArgv(p.host, f.ssh, cwd, env, command);
        spec.stdin_data = secret + "\n";
      }
      if (f.verbose) std::cerr << "horarun: rank " << p.rank << " on " << p.host << (local[p.host] ? "" : " (ssh)") << "\n";
      workers.start(spec);
    }

    // Every rank announces itself in the store when its first Communicator connects; a rank
    // that has not within --start-timeout fails the job, naming its host.
    std::unique_ptr<hora::rendezvous::TcpStore> watcher;
    std::set<int> waiting;
    for (int r = 0; r < f.np; ++r) waiting.insert(r);
    auto last_look = started_at;
    const auto check = [&]() -> std::string {
      const auto now = std::chrono::steady_clock::now();
      if (waiting.empty() || now - last_look < std::chrono::milliseconds(200)) return "";
      last_look = now;
      const auto soon = hora::common::Deadline::after(std::chrono::seconds(5));
      if (!watcher) watcher = std::make_unique<hora::rendezvous::TcpStore>(store_host, store.port(), secret, soon);
      for (auto it = waiting.begin(); it != waiting.end();) {
        const bool gone = !workers.isRunning(*it);  // a rank that ended is judged by its exit code
        it = gone || watcher->tryGet("started/" + std::to_string(*it), soon) ? waiting.erase(it) : std::next(it);
      }
      if (waiting.empty() || now - started_at < std::chrono::duration<double>(f.start_timeout)) return "";
      const int r = *waiting.begin();
      return "rank " + std::to_string(r) + " on host " + placements[static_cast<size_t>(r)].host +
             " did not reach the rendezvous store within --start-timeout " + std::to_string(static_cast<int>(f.start_timeout)) +
             " s (" + std::to_string(waiting.size()) + " rank(s) missing)";
    };
    const auto result = workers.wait(check);
    if (result.exit_code != 0) {
      std::cerr << "horarun: " << result.reason << "; the other ranks were stopped\n";
      return result.exit_code;
    }
    if (f.verbose) std::cerr << "horarun: all " << f.np << " ranks finished\n";
    return 0;
  } catch (const hora::InvalidArgumentError& e) {
    std::cerr << "horarun: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "horarun: " << e.what() << "\n";
    return 1;
  }
}
