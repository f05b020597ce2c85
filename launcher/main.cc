// horarun: starts the ranks of a hora job and serves their rendezvous store.
//
//   horarun -np 4 python train.py --epochs 3
//
// This first version runs every rank on the local host (the launcher issue adds -H, ssh, mpirun).
// The job secret is generated here and reaches the workers only through their environment.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>

#include "common/crypto.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "hora/errors.h"
#include "launcher/worker_set.h"
#include "rendezvous/tcp_store_server.h"

namespace {

constexpr const char* kVersion = "0.1.0";

std::string localHostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// Horovod spells the rank count "-np", which CLI11 cannot declare (one dash, two letters).
// Rewrite it to --num-proc in horarun's own flags, never in the worker command.
std::vector<std::string> normalizeArgs(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "-np") args[i] = "--num-proc";
    if (args[i].empty() || args[i][0] != '-') break;  // the command starts here
    const bool takes_value = args[i] == "--num-proc" || args[i] == "-n" || args[i] == "-x" ||
                             args[i] == "--export" || args[i] == "--grace-seconds";
    if (takes_value) ++i;
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"horarun: run a hora job of N ranks on this host.\n"};
  app.footer("Environment variables read by every rank:\n" + hora::common::knobsMarkdown());
  int np = 0;
  bool verbose = false;
  std::vector<std::string> command;
  std::vector<std::string> exports;
  double grace_seconds = 3;
  app.add_option("-n,--num-proc", np, "Number of ranks to start (-np works too)")->required();
  app.add_option("-x,--export", exports, "Set VAR=value (or pass VAR through) for every rank");
  app.add_option("--grace-seconds", grace_seconds, "After a rank fails, seconds between SIGTERM and SIGKILL for the others")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_flag("--verbose", verbose, "Print what horarun does");
  app.set_version_flag("--version", std::string("horarun (hora) ") + kVersion);
  app.prefix_command();  // the first positional and everything after it is the command
  try {
    auto args = normalizeArgs(argc, argv);
    args.erase(args.begin());                // the program name
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  command = app.remaining();
  if (!command.empty() && command[0].size() > 1 && command[0][0] == '-') {
    std::cerr << "horarun: unknown flag " << command[0] << "; see horarun --help\n";
    return 2;
  }
  if (np < 1) {
    std::cerr << "horarun: -np must be at least 1 (got " << np << ")\n";
    return 2;
  }
  if (command.empty()) {
    std::cerr << "horarun: no command given; usage: horarun -np N command [args...]\n";
    return 2;
  }

  std::map<std::string, std::string> extra_env;
  for (const auto& x : exports) {
    const auto eq = x.find('=');
    if (eq == std::string::npos) {
      if (const char* v = std::getenv(x.c_str())) extra_env[x] = v;
    } else {
      extra_env[x.substr(0, eq)] = x.substr(eq + 1);
    }
  }

  try {
    const std::string secret = hora::common::randomSecret();
    hora::rendezvous::TcpStoreServer store("127.0.0.1", 0, secret);
    if (verbose)
      std::cerr << "horarun: rendezvous store on 127.0.0.1:" << store.port() << ", starting " << np
                << " ranks: " << command[0] << "\n";
    hora::launcher::installForwardingSignalHandlers();
    hora::launcher::WorkerSet workers(
        std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
    const std::string host = localHostname();
    for (int rank = 0; rank < np; ++rank) {
      hora::launcher::WorkerSpec spec;
      spec.rank = rank;
      spec.argv = command;
      spec.env = extra_env;
      spec.env["HORA_RANK"] = std::to_string(rank);
      spec.env["HORA_SIZE"] = std::to_string(np);
      spec.env["HORA_LOCAL_RANK"] = std::to_string(rank);
      spec.env["HORA_LOCAL_SIZE"] = std::to_string(np);
      spec.env["HORA_CROSS_RANK"] = "0";
      spec.env["HORA_CROSS_SIZE"] = "1";
      spec.env["HORA_HOSTNAME"] = host;
      spec.env["HORA_RENDEZVOUS_ADDR"] = "127.0.0.1";
      spec.env["HORA_RENDEZVOUS_PORT"] = std::to_string(store.port());
      spec.env["HORA_SECRET"] = secret;
      workers.start(spec);
    }
    const auto result = workers.wait();
    if (result.exit_code != 0) {
      std::cerr << "horarun: " << result.reason << " on host " << host
                << "; the other ranks were stopped\n";
      return result.exit_code;
    }
    if (verbose) std::cerr << "horarun: all " << np << " ranks finished\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "horarun: " << e.what() << "\n";
    return 1;
  }
}
