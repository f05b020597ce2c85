#include "launcher/thread_budget.h"

#include <sched.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/knobs.h"

namespace hora::launcher {

namespace {

constexpr const char* kThreads = "OMP_NUM_THREADS";

bool isRank(const std::map<std::string, std::string>& env) { return env.count("HORA_LOCAL_SIZE") > 0; }

}  // namespace

std::optional<std::string> threadBudget(const std::map<std::string, std::string>& env, bool inherited, int cores,
                                        int together) {
  if (inherited || env.count(kThreads) || !isRank(env)) return std::nullopt;  // (a parameter server is no rank)
  const int workers = std::max(std::stoi(env.at("HORA_LOCAL_SIZE")), together);
  if (workers <= 1) return std::nullopt;  // alone on its host: the libraries' own default
  return std::to_string(std::max(1, cores / workers));
}

int usableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

int addThreadBudget(std::vector<std::map<std::string, std::string>*> envs, bool say) {
  const bool inherited = common::processVariable(kThreads).has_value();
  const int cores = usableCores();
  const auto together =
      static_cast<int>(std::count_if(envs.begin(), envs.end(), [](auto* env) { return isRank(*env); }));
  int set = 0;
  std::string value;
  for (auto* env : envs) {
    if (auto threads = threadBudget(*env, inherited, cores, together)) {
      value = *threads;
      (*env)[kThreads] = std::move(*threads);
      ++set;
    }
  }
  if (say && set > 0)
    std::cerr << "horarun: " << kThreads << "=" << value << " for each of the " << set << " workers on this host ("
              << cores << " cores), as torchrun does; set " << kThreads << " to choose otherwise\n";
  return set;
}

}  // namespace hora::launcher
