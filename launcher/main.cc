// horarun: starts the ranks of a hora job, locally and over ssh, and serves their rendezvous
// store.
//
//   horarun -np 4 python train.py --epochs 3
//   horarun -np 8 -H a:4,b:4 python train.py
//
// The job secret is generated here and reaches the workers only through their environment
// (local) or their stdin (ssh), never a command line. The command line is parsed in flags.h.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "common/crypto.h"
#include "common/deadline.h"
#include "common/knobs.h"
#include "common/socket.h"
#include "hora/errors.h"
#include "ps/server.h"
#include "launcher/elastic_driver.h"
#include "launcher/flags.h"
#include "launcher/host_agent.h"
#include "launcher/hydra_ssh.h"
#include "launcher/forwarded_env.h"
#include "launcher/host_resolution.h"
#include "launcher/hosts.h"
#include "launcher/ps_servers.h"
#include "launcher/remote.h"
#include "launcher/worker_set.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

extern char** environ;

namespace {

using namespace hora::launcher;
using Env = std::map<std::string, std::string>;

// Where the ranks run and where they find the store.
struct JobPlan {
  std::vector<HostSlots> hosts;
  std::vector<Placement> placements;  // by rank
  std::map<std::string, bool> local;  // by host: this machine?
  std::string first_remote;           // empty when every host is local
  std::string store_host;             // the address the store listens on
};

JobPlan planJob(const JobFlags& f) {
  JobPlan plan;
  plan.hosts = resolveHosts(f, hora::common::Env::fromProcess(), f.np);
  plan.placements = placeRanks(plan.hosts, f.np);
  for (const auto& p : plan.placements) {
    if (plan.local.count(p.host)) continue;
    plan.local[p.host] = isLocalHost(p.host);
    if (!plan.local[p.host] && plan.first_remote.empty()) plan.first_remote = p.host;
  }
  // The store listens where every host can reach it: loopback for a local job, else our
  // address on the route to the remote hosts (or on --network-interface).
  plan.store_host = "127.0.0.1";
  if (!f.network_interface.empty()) plan.store_host = hora::common::interfaceAddress(f.network_interface);
  else if (!plan.first_remote.empty()) plan.store_host = addressToward(plan.first_remote);
  return plan;
}

// OpenMPI's or MPICH's mpirun (whichever `mpirun` is), or "" (reported) when it is neither.
std::string mpirunFlavour() {
  std::string version;
  if (FILE* p = ::popen("mpirun --version 2>&1", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p)) version += buf;
    ::pclose(p);
  }
  if (version.find("Open MPI") != std::string::npos || version.find("OpenRTE") != std::string::npos) return "openmpi";
  if (version.find("HYDRA") != std::string::npos) return "hydra";
  std::cerr << "horarun: --mpi needs OpenMPI's or MPICH's mpirun on PATH; `mpirun --version` said: "
            << (version.empty() ? "nothing (not found)" : version) << "\n";
  return "";
}

// mpirun's argv for the job; `env` is exported into this process, named (not valued) there.
std::vector<std::string> mpirunArgv(const JobFlags& f, const JobPlan& plan, bool openmpi, const Env& env) {
  std::string host_list, names;
  for (const auto& h : plan.hosts) host_list += (host_list.empty() ? "" : ",") + h.host + ":" + std::to_string(h.slots);
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(f.np)};
  for (const auto& [k, v] : env) {
    ::setenv(k.c_str(), v.c_str(), 1);
    names += (names.empty() ? "" : ",") + k;
    if (openmpi) argv.insert(argv.end(), {"-x", k});
  }
  const bool hosts_given = !f.hosts.empty() || !f.hostfile.empty();
  // --binding-args replaces horarun's binding (both MPIs), --mpi-args adds to it, as horovodrun.
  const std::vector<std::string> binding = splitWords(f.binding_args, "--binding-args");
  const std::vector<std::string> extra = splitWords(f.mpi_args, "--mpi-args");
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), binding.begin(), binding.end());
  if (openmpi) {
    if (binding.empty()) argv.insert(argv.end(), {"--bind-to", "none", "--map-by", "slot"});
    if (hosts_given) argv.insert(argv.end(), {"-H", host_list});
    std::string rsh;
    if (f.ssh.port > 0) rsh += "-p " + std::to_string(f.ssh.port);
    if (!f.ssh.identity_file.empty()) rsh += (rsh.empty() ? "" : " ") + std::string("-i ") + f.ssh.identity_file;
    if (!rsh.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_args", rsh});
    if (!f.network_interface.empty())
      argv.insert(argv.end(), {"--mca", "btl_tcp_if_include", f.network_interface, "--mca", "oob_tcp_if_include",
                               f.network_interface});
  } else {
    argv.insert(argv.end(), {"-genvlist", names});
    if (hosts_given) argv.insert(argv.end(), {"-hosts", host_list});
    if (!f.network_interface.empty()) argv.insert(argv.end(), {"-iface", f.network_interface});
  }
  argv.insert(argv.end(), f.command.begin(), f.command.end());
  return argv;
}

// --mpi: hand the job to mpirun. The ranks then find each other as any mpirun-started hora job
// does (src/common/foreign_launch.h: rank 0's store through the launcher's key-value service);
// the job secret and every -x / knob variable travel in the environment (named, not valued, on
// mpirun's command line). Returns mpirun's exit code when it ran as a child (Hydra with ssh
// options), else only when mpirun cannot be executed.
int execMpirun(const JobFlags& f, const JobPlan& plan, Env env) {
  const std::string flavour = mpirunFlavour();
  if (flavour.empty()) return 127;
  env["HORA_SECRET"] = hora::common::randomSecret();
  std::vector<std::string> argv = mpirunArgv(f, plan, flavour == "openmpi", env);
  std::unique_ptr<HydraSsh> hydra_ssh;
  if (flavour == "hydra" && (f.ssh.port > 0 || !f.ssh.identity_file.empty())) {
    hydra_ssh = std::make_unique<HydraSsh>(f.ssh);
    argv.insert(argv.begin() + 1, {"-launcher", "ssh", "-launcher-exec", hydra_ssh->path()});
  }
  if (f.verbose) {
    std::cerr << "horarun:";
    for (const auto& a : argv) std::cerr << " " << a;
    std::cerr << "\n";
  }
  if (hydra_ssh) return runForwardingSignals(argv);  // the script goes when mpirun ends
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  ::execvp("mpirun", raw.data());
  std::cerr << "horarun: cannot execute mpirun: " << std::strerror(errno) << "\n";
  return 127;
}

// Rank p's environment: its HORA_* identity, the store's address and the secret beside `env`.
Env rankEnvironment(const JobFlags& f, const JobPlan& plan, const Placement& p, Env env, int store_port,
                    const std::string& secret) {
  env["HORA_RANK"] = std::to_string(p.rank);
  env["HORA_SIZE"] = std::to_string(f.np);
  env["HORA_LOCAL_RANK"] = std::to_string(p.local_rank);
  env["HORA_LOCAL_SIZE"] = std::to_string(p.local_size);
  env["HORA_CROSS_RANK"] = std::to_string(p.cross_rank);
  env["HORA_CROSS_SIZE"] = std::to_string(p.cross_size);
  env["HORA_HOSTNAME"] = p.host;
  // horovodrun's names too: scripts (and Horovod's own tests) read HOROVOD_RANK and the like.
  for (const char* name : {"RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME"})
    env[std::string("HOROVOD_") + name] = env[std::string("HORA_") + name];
  env["HORA_RENDEZVOUS_ADDR"] = plan.store_host;
  env["HORA_RENDEZVOUS_PORT"] = std::to_string(store_port);
  env["HORA_SECRET"] = secret;
  return env;
}

// What starts the job's ranks: a process per rank of this host (the secret in its environment),
// and per remote host one ssh that starts horarun's host agent there, which forks that host's
// ranks (host_agent.h; the plan, secret included, goes to its stdin, never a command line).
std::vector<WorkerSpec> workerSpecs(const JobFlags& f, const JobPlan& plan, const Env& env, int store_port,
                                    const std::string& secret) {
  std::vector<WorkerSpec> specs;
  std::map<std::string, HostPlan> remote;
  std::vector<std::string> remote_order;
  for (const auto& p : plan.placements) {
    Env rank_env = rankEnvironment(f, plan, p, env, store_port, secret);
    if (plan.local.at(p.host)) {
      WorkerSpec spec;
      spec.rank = p.rank;
      spec.host = p.host;
      spec.argv = f.command;
      spec.env = std::move(rank_env);
      specs.push_back(std::move(spec));
      continue;
    }
    // horovodrun's behaviour: a remote rank sees this shell's environment (PATH, a virtualenv,
    // PYTHONPATH, ...) beneath horarun's own variables (Note [forwarded environment]).
    for (auto& [k, v] : forwardedEnvironment(environ)) rank_env.emplace(k, v);
    auto [it, first] = remote.try_emplace(p.host);
    if (first) remote_order.push_back(p.host);
    it->second.host = p.host;
    it->second.grace_ms = static_cast<int>(f.grace_seconds * 1000);
    it->second.command = f.command;
    it->second.ranks.push_back({p.rank, std::move(rank_env)});
  }
  SshOptions ssh = f.ssh;
  ssh.connect_timeout = std::chrono::seconds(static_cast<int64_t>(f.start_timeout));
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  for (const auto& host : remote_order) {
    const HostPlan& host_plan = remote.at(host);
    WorkerSpec spec;
    spec.rank = host_plan.ranks.front().rank;
    spec.host = host;
    for (const auto& r : host_plan.ranks) spec.agent_ranks.push_back(r.rank);
    spec.argv = sshHostAgentArgv(host, ssh, std::filesystem::current_path().string(), self);
    spec.stdin_data = encodeHostPlan(host_plan);
    specs.push_back(std::move(spec));
  }
  return specs;
}

// Every rank announces itself in the store when its first Communicator connects; a rank that
// has not within --start-timeout fails the job, naming its host. Called by WorkerSet::wait.
class StartWatch {
 public:
  StartWatch(const JobFlags& f, const JobPlan& plan, const WorkerSet& workers, int store_port, std::string secret)
      : f_(f), plan_(plan), workers_(workers), port_(store_port), secret_(std::move(secret)) {
    for (int r = 0; r < f.np; ++r) waiting_.insert(r);
  }

  // The reason to fail the job, or "".
  std::string operator()() {
    const auto now = std::chrono::steady_clock::now();
    if (waiting_.empty() || now - last_look_ < std::chrono::milliseconds(200)) return "";
    last_look_ = now;
    const auto soon = hora::common::Deadline::after(std::chrono::seconds(5));
    if (!store_) store_ = std::make_unique<hora::rendezvous::TcpStore>(plan_.store_host, port_, secret_, soon);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      const bool gone = !workers_.isRunning(*it);  // a rank that ended is judged by its exit code
      it = gone || store_->tryGet("started/" + std::to_string(*it), soon) ? waiting_.erase(it) : std::next(it);
    }
    if (waiting_.empty() || now - started_at_ < std::chrono::duration<double>(f_.start_timeout)) return "";
    const int r = *waiting_.begin();
    return "rank " + std::to_string(r) + " on host " + plan_.placements[static_cast<size_t>(r)].host +
           " did not reach the rendezvous store within --start-timeout " +
           std::to_string(static_cast<int>(f_.start_timeout)) + " s (" + std::to_string(waiting_.size()) +
           " rank(s) missing)";
  }

 private:
  const JobFlags& f_;
  const JobPlan& plan_;
  const WorkerSet& workers_;
  const int port_;
  const std::string secret_;
  const std::chrono::steady_clock::time_point started_at_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_look_ = started_at_;
  std::set<int> waiting_;
  std::unique_ptr<hora::rendezvous::TcpStore> store_;
};

// The name this host's ranks know it by, so that parameter servers share memory with them.
std::string firstLocalHost(const JobPlan& plan) {
  for (const auto& p : plan.placements)
    if (plan.local.at(p.host)) return p.host;
  return "";  // every rank is remote: the server's own hostname (gethostname)
}

// horarun's own launcher: serves the store, starts every rank and waits for the job.
int launch(const JobFlags& f, const JobPlan& plan, const Env& env) {
  const std::string secret = hora::common::randomSecret();
  hora::rendezvous::TcpStoreServer store(plan.store_host, 0, secret);
  if (f.verbose)
    std::cerr << "horarun: rendezvous store on " << plan.store_host << ":" << store.port() << ", starting " << f.np
              << " ranks on " << plan.local.size() << " host(s): " << f.command[0] << "\n";
  installForwardingSignalHandlers();
  WorkerSet workers(std::chrono::milliseconds(static_cast<int64_t>(f.grace_seconds * 1000)), f.output_dir,
                    f.timestamp_output);
  StartWatch watch(f, plan, workers, store.port(), secret);
  for (const auto& spec : workerSpecs(f, plan, env, store.port(), secret)) {
    if (f.verbose && spec.agent_ranks.empty()) std::cerr << "horarun: rank " << spec.rank << " on " << spec.host << "\n";
    if (f.verbose && !spec.agent_ranks.empty())
      std::cerr << "horarun: ranks " << spec.agent_ranks.front() << "-" << spec.agent_ranks.back() << " on "
                << spec.host << " (ssh, one host agent)\n";
    workers.start(spec);
  }
  if (f.servers > 0) {
    const std::string host = firstLocalHost(plan);
    for (const auto& spec : serverSpecs(f.np, f.servers, env, host, plan.store_host, store.port(), secret)) {
      workers.start(spec);
      workers.relabel(spec.rank, "ps" + std::to_string(spec.rank - f.np));
    }
  }
  bool servers_stopped = false;
  auto result = workers.wait([&] {
    std::string why = watch();
    return why.empty() ? stopServersWhenRanksEnd(workers, f.np, f.servers, servers_stopped) : why;
  });
  nameFailedServer(result, f.np);
  // A host agent that failed left the rank and the reason in the store.
  if (result.exit_code != 0 && !result.failed_host.empty()) {
    try {
      const auto soon = hora::common::Deadline::after(std::chrono::seconds(2));
      hora::rendezvous::TcpStore client(plan.store_host, store.port(), secret, soon);
      if (auto why = client.tryGet(agentReportKey(result.failed_host), soon)) result.reason = *why;
    } catch (const std::exception&) {
    }
  }
  if (result.exit_code != 0) {
    std::cerr << "horarun: " << result.reason << "; the other ranks were stopped\n";
    return result.exit_code;
  }
  if (f.verbose) std::cerr << "horarun: all " << f.np << " ranks finished\n";
  return 0;
}

int run(const JobFlags& f) {
  try {
    if (f.servers > 0 && (f.elastic.enabled() || f.mpi))
      throw hora::InvalidArgumentError("--servers cannot be combined with an elastic job or --mpi yet");
    if (f.elastic.enabled()) return runElasticJob(f, workerEnvironment(f));
    const JobPlan plan = planJob(f);
    if (f.mpi) {
      // mpirun forwards only what it is told (OpenMPI's -x, MPICH's -genvlist): tell it everything
      // horarun would forward itself.
      Env env = workerEnvironment(f);
      for (auto& [k, v] : forwardedEnvironment(environ)) env.emplace(k, v);
      return execMpirun(f, plan, env);
    }
    Env env = workerEnvironment(f);
    if (f.servers > 0) env["HORA_PS_SERVERS"] = std::to_string(f.servers);
    return launch(f, plan, env);
  } catch (const hora::InvalidArgumentError& e) {
    std::cerr << "horarun: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "horarun: " << e.what() << "\n";
    return 1;
  }
}

void printBuild() {
  const auto mark = [](bool built) { return built ? "[x]" : "[ ]"; };
  std::cout << "hora " << kVersion << "\n"
            << "  transports:   [x] tcp  [x] shared memory (between ranks on one host), chosen per pair\n"
            << "  collectives:  [x] flat  [x] hierarchical across hosts  [ ] NCCL, GPUs (CPU only)\n"
            << "  MPI:          [ ] not linked; ranks started by mpirun or srun find each other through the\n"
            << "                    rendezvous store (see README, \"Without horarun\")\n"
            << "  frontends:    [x] C++ (hora::hora)  [x] C ABI (hora/c_api.h)  " << mark(HORA_WITH_PYTHON)
            << " PyTorch (hora.torch)  " << mark(HORA_WITH_TORCH) << " libtorch (hora::torch)  "
            << mark(HORA_WITH_TENSORFLOW) << " TensorFlow (hora.tensorflow)\n"
            << "  launcher:     [x] local  [x] ssh  [x] mpirun (--mpi)\n";
}

void printKnobsMarkdown() {
  std::cout << "# Environment variables\n\nGenerated by `horarun --knobs-markdown` from the knob "
               "registry (src/common/knobs.cc).\n\n"
            << hora::common::knobsMarkdown();
}

}  // namespace

int main(int argc, char** argv) {
  // On a remote host, started by another horarun over ssh (not a user's flag: not in --help).
  if (argc == 2 && std::string(argv[1]) == "--host-agent") return runHostAgent();
  // A parameter server of a job this horarun's parent started (launcher/ps_servers.h).
  if (argc == 2 && std::string(argv[1]) == kPsServerFlag) return hora::ps::runServerFromEnvironment();
  const CommandLine c = parseCommandLine(argc, argv);
  switch (c.action) {
    case CommandLine::Action::kExit: return c.exit_code;
    case CommandLine::Action::kPrintKnobs: printKnobsMarkdown(); return 0;
    case CommandLine::Action::kCheckBuild: printBuild(); return 0;
    case CommandLine::Action::kRun: return run(c.job);
  }
  return 1;
}
