#include "common/foreign_launch.h"

#include <unistd.h>

#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/logging.h"
#include "hora/errors.h"

namespace hora::common {

std::optional<ForeignLaunch> detectForeignLaunch(const Env& env) {
  if (env.isSet("HORA_SIZE")) return std::nullopt;  // horarun (or the user) said everything
  ForeignLaunch job;
  if (env.isSet("OMPI_COMM_WORLD_SIZE")) {
    job.launcher = "OpenMPI";
    job.size = static_cast<int>(env.getInt("OMPI_COMM_WORLD_SIZE", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("OMPI_COMM_WORLD_RANK", 0, job.size - 1));
    job.single_host = env.isSet("OMPI_COMM_WORLD_LOCAL_SIZE") &&
                      env.getInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1, job.size) == job.size;
    job.job_id = env.getString("OMPI_MCA_ess_base_jobid");
    if (env.isSet("PMIX_NAMESPACE")) job.launcher_kvs = "pmix";
  } else if (env.isSet("PMI_SIZE")) {
    job.launcher = "MPICH";
    job.size = static_cast<int>(env.getInt("PMI_SIZE", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("PMI_RANK", 0, job.size - 1));
    job.single_host = env.isSet("MPI_LOCALNRANKS") && env.getInt("MPI_LOCALNRANKS", 1, job.size) == job.size;
    // Hydra names no job; on one host every rank is a child of the same proxy process.
    if (job.single_host) job.job_id = "hydra-" + std::to_string(::getppid());
    if (env.isSet("PMI_FD")) job.launcher_kvs = "pmi-fd:" + std::to_string(env.getInt("PMI_FD", 0, 1 << 20));
  } else if (env.isSet("SLURM_NTASKS") && env.isSet("SLURM_PROCID")) {
    job.launcher = "Slurm";
    job.size = static_cast<int>(env.getInt("SLURM_NTASKS", 1, 1 << 20));
    job.rank = static_cast<int>(env.getInt("SLURM_PROCID", 0, job.size - 1));
    job.single_host = env.isSet("SLURM_STEP_NUM_NODES") && env.getInt("SLURM_STEP_NUM_NODES", 1, 1 << 20) == 1;
    job.job_id = env.getString("SLURM_JOB_ID") + "." + env.getString("SLURM_STEP_ID");
    job.first_host = firstSlurmHost(env.getString("SLURM_STEP_NODELIST"));
  } else if (env.isSet("TF_CONFIG")) {
    job = parseTfConfig(env.getString("TF_CONFIG"));
  } else {
    return std::nullopt;
  }
  return job;
}

namespace {

// "host:port" or "[v6]:port" -> (host, port).
std::pair<std::string, int> splitHostPort(const std::string& entry) {
  const auto colon = entry.rfind(':');
  const auto bad = [&] { return InvalidArgumentError("TF_CONFIG: cluster entry '" + entry + "' is not host:port"); };
  if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size()) throw bad();
  std::string host = entry.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  for (char c : entry.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) throw bad();
    port = port * 10 + (c - '0');
  }
  if (port < 1 || port > 65535) throw bad();
  return {host, port};
}

}  // namespace

ForeignLaunch parseTfConfig(const std::string& tf_config) {
  const auto bad = [](const std::string& why) { return InvalidArgumentError("TF_CONFIG: " + why); };
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(tf_config);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("not JSON (") + e.what() + ")");
  }
  if (!config.is_object() || !config.contains("cluster") || !config["cluster"].is_object())
    throw bad("no \"cluster\" object");
  if (!config.contains("task") || !config["task"].is_object() || !config["task"].contains("type") ||
      !config["task"].contains("index") || !config["task"]["type"].is_string() ||
      !config["task"]["index"].is_number_integer())
    throw bad("no \"task\": {\"type\": ..., \"index\": ...}");
  const std::string type = config["task"]["type"];
  const int64_t index = config["task"]["index"];
  // Every task that trains takes part in the allreduce: the chief (or the old name, master)
  // first, then the workers. Parameter servers and evaluators do not train.
  ForeignLaunch job;
  job.launcher = "TF_CONFIG";
  std::vector<std::string> entries;
  bool found = false;
  for (const char* role : {"chief", "master", "worker"}) {
    if (!config["cluster"].contains(role)) continue;
    const auto& list = config["cluster"][role];
    if (!list.is_array()) throw bad(std::string("cluster.") + role + " is not a list of \"host:port\"");
    if (type == role) {
      if (index < 0 || index >= static_cast<int64_t>(list.size()))
        throw bad("task index " + std::to_string(index) + " is out of range for the " +
                  std::to_string(list.size()) + " " + role + " entries");
      job.rank = static_cast<int>(entries.size() + static_cast<size_t>(index));
      found = true;
    }
    for (const auto& e : list) {
      if (!e.is_string()) throw bad(std::string("cluster.") + role + " holds a non-string entry");
      entries.push_back(e.get<std::string>());
    }
  }
  if (!found)
    throw bad("task type '" + type + "' does not train with allreduce (hora's ranks are the chief and "
              "worker tasks); start only those with hora, or give the cluster a '" + type + "' list");
  job.size = static_cast<int>(entries.size());
  std::tie(job.first_host, job.first_port) = splitHostPort(entries[0]);
  job.single_host = true;
  for (const auto& e : entries) job.single_host = job.single_host && splitHostPort(e).first == job.first_host;
  job.job_id = config["cluster"].dump();
  return job;
}

std::string firstSlurmHost(const std::string& list) {
  const auto bracket = list.find('[');
  const auto comma = list.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return list.substr(0, comma);
  // "node[01-04,07]": the prefix and the first number of the range, zero padding kept.
  const auto end = list.find_first_of("-,]", bracket + 1);
  return list.substr(0, bracket) + list.substr(bracket + 1, end - bracket - 1);
}

RendezvousOptions foreignRendezvous(const Env& env, const ForeignLaunch& job) {
  RendezvousOptions r;
  const std::string via = " (a job started by " + job.launcher + " without horarun)";
  if (!job.launcher_kvs.empty() && !env.isSet("HORA_RENDEZVOUS_ADDR") && !env.isSet("HORA_RENDEZVOUS_PORT")) {
    // Learned at the first Communicator (bootstrap/store_through_launcher.h).
    r.launcher_kvs = job.launcher_kvs;
    r.address = job.single_host ? "127.0.0.1" : "";
    r.port = 0;
    r.secret = env.getString("HORA_SECRET");
    r.serve_store = job.rank == 0;
    return r;
  }
  if (env.isSet("HORA_RENDEZVOUS_ADDR")) r.address = env.getString("HORA_RENDEZVOUS_ADDR");
  else if (job.single_host && job.launcher != "TF_CONFIG") r.address = "127.0.0.1";
  else if (!job.first_host.empty()) r.address = job.first_host;
  else
    throw InvalidArgumentError("HORA_RENDEZVOUS_ADDR is not set" + via + " and " + job.launcher +
                               " offers no key-value service to learn rank 0's address from (" +
                               (job.launcher == "OpenMPI" ? "PMIX_NAMESPACE" : "PMI_FD") +
                               " is not set): set it to the address of rank 0's host, e.g. mpirun -x HORA_RENDEZVOUS_ADDR=host0");
  if (env.isSet("HORA_RENDEZVOUS_PORT")) {
    r.port = static_cast<int>(env.getInt("HORA_RENDEZVOUS_PORT", 1, 65535));
  } else if (job.first_port != 0) {
    r.port = job.first_port;
  } else if (!job.job_id.empty()) {
    // Unprivileged, below the usual ephemeral range (32768+), spread by the job id.
    r.port = 20000 + static_cast<int>(std::hash<std::string>{}("hora-port:" + job.job_id) % 12000);
  } else {
    throw InvalidArgumentError("HORA_RENDEZVOUS_PORT is not set" + via +
                               " and this launcher names no job to derive it from: set it, e.g. mpirun -x HORA_RENDEZVOUS_PORT=29500");
  }
  if (env.isSet("HORA_SECRET")) {
    r.secret = env.getString("HORA_SECRET");
  } else {
    const std::string id = job.job_id + "@" + r.address + ":" + std::to_string(r.port);
    const Mac derived = hmacSha256("hora foreign job", {std::span(reinterpret_cast<const uint8_t*>(id.data()), id.size())});
    static constexpr char kHex[] = "0123456789abcdef";
    for (uint8_t b : derived) r.secret.append(1, kHex[b >> 4]).append(1, kHex[b & 15]);
    if (job.rank == 0)
      HORA_LOG(warn, "HORA_SECRET is not set{}: the rendezvous is keyed by the job id only; export a random "
               "HORA_SECRET to every rank (mpirun -x HORA_SECRET) to keep others out", via);
  }
  r.serve_store = job.rank == 0;
  return r;
}

}  // namespace hora::common
