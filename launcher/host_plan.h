// HostPlan: what horarun's host agent on a remote host runs (host_agent.h), and its encoding on
// the agent's stdin.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace hora::launcher {

struct HostPlan {
  std::string host;             // as horarun names it (-H), for messages
  int grace_ms = 3000;          // between TERM and KILL
  std::vector<std::string> command;
  struct Rank {
    int rank = 0;
    std::map<std::string, std::string> env;  // added to the agent's environment
  };
  std::vector<Rank> ranks;
};

// A byte string, newlines and all: fields as "<length>:<bytes>". decode throws
// InvalidArgumentError on anything else.
std::string encodeHostPlan(const HostPlan& plan);
HostPlan decodeHostPlan(const std::string& text);

}  // namespace hora::launcher
