#include "launcher/mpirun_job.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <vector>

#include "common/crypto.h"
#include "launcher/forwarded_env.h"
#include "launcher/hydra_ssh.h"
#include "launcher/worker_set.h"

extern char** environ;

namespace hora::launcher {
namespace {

using Env = std::map<std::string, std::string>;

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

}  // namespace

int runMpirunJob(const JobFlags& f, const JobPlan& plan, Env env) {
  const std::string flavour = mpirunFlavour();
  if (flavour.empty()) return 127;
  // mpirun forwards only what it is told (OpenMPI's -x, MPICH's -genvlist): tell it everything
  // horarun would forward itself.
  for (auto& [k, v] : forwardedEnvironment(environ)) env.emplace(k, v);
  env["HORA_SECRET"] = common::randomSecret();
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

}  // namespace hora::launcher
