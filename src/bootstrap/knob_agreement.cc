#include "bootstrap/knob_agreement.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "hora/errors.h"

namespace hora::bootstrap {
namespace {

// One spelling per number: byte counts with a K/M/G suffix expanded, decimals printed alike.
std::string canonical(const std::string& value) {
  if (auto bytes = common::parseBytes(value)) return std::to_string(*bytes);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(value.c_str(), &end);
  if (!value.empty() && errno == 0 && *end == '\0' && std::isfinite(d)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.15g", d);
    return text;
  }
  return value;
}

// NAME -> value, from jobKnobs() text.
std::map<std::string, std::string> parseLines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// "0-3, 6, 8-9"
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string jobKnobs(const common::Env& env) {
  std::string out;
  for (const auto& k : common::allKnobs()) {
    if (k.scope != common::KnobScope::kJob) continue;
    out.append(k.name).append("=").append(canonical(env.getString(k.name))).append("\n");
  }
  return out;
}

std::string describeDisagreement(const std::vector<std::string>& by_rank, const std::function<int(int)>& label) {
  std::vector<std::map<std::string, std::string>> knobs;
  for (const auto& text : by_rank) knobs.push_back(parseLines(text));
  std::string out;
  for (const auto& k : common::allKnobs()) {
    if (k.scope != common::KnobScope::kJob) continue;
    const std::string name(k.name);
    std::map<std::string, std::vector<int>> holders;  // value -> ranks
    for (size_t r = 0; r < knobs.size(); ++r) {
      auto it = knobs[r].find(name);
      holders[it == knobs[r].end() ? "(unknown to this rank's hora)" : it->second].push_back(
          label(static_cast<int>(r)));
    }
    if (holders.size() < 2) continue;
    const std::string fallback = canonical(std::string(k.default_value));
    std::string parts;
    for (const auto& [value, ranks] : holders) {
      parts += (parts.empty() ? "" : " but ") + std::string("'") + value + "'" +
               (value == fallback ? " (the default)" : "") + " on rank" + (ranks.size() > 1 ? "s " : " ") +
               rankList(ranks);
    }
    out += (out.empty() ? "" : "; ") + name + " is " + parts;
  }
  if (out.empty()) return out;
  return "the ranks disagree on knobs that must be the same on every rank: " + out +
         " (set them alike for every rank: in horarun's environment, with -x NAME=VALUE or --knob NAME=VALUE)";
}

void agreeOnKnobs(rendezvous::Store& store, const std::string& prefix, int rank, int size, const std::string& mine,
                  const std::function<int(int)>& label, const common::Deadline& deadline) {
  store.set(prefix + "knobs/" + std::to_string(rank), mine, deadline);
  std::string verdict;
  if (rank == 0) {
    std::vector<std::string> by_rank(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      try {
        by_rank[static_cast<size_t>(r)] = r == 0 ? mine : store.get(prefix + "knobs/" + std::to_string(r), deadline);
      } catch (const TimeoutError& e) {
        throw TimeoutError("rank " + std::to_string(label(0)) + ": timed out waiting for rank " +
                           std::to_string(label(r)) + " to publish its knobs: " + e.what());
      }
    }
    verdict = describeDisagreement(by_rank, label);
    store.set(prefix + "knobs/verdict", verdict, deadline);
  } else {
    try {
      verdict = store.get(prefix + "knobs/verdict", deadline);
    } catch (const TimeoutError& e) {
      throw TimeoutError("rank " + std::to_string(label(rank)) + ": timed out waiting for rank " +
                         std::to_string(label(0)) + " to compare the ranks' knobs: " + e.what());
    }
  }
  if (!verdict.empty()) throw InvalidArgumentError("rank " + std::to_string(label(rank)) + ": " + verdict);
}

}  // namespace hora::bootstrap
