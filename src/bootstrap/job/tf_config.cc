#include "bootstrap/job/tf_config.h"

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hora/errors.h"

namespace hora::bootstrap {

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

}  // namespace hora::bootstrap
