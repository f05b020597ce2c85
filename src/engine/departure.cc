#include "engine/departure.h"

#include <numeric>
#include <utility>
#include <vector>

namespace hora::engine {
namespace {

// Every rank's text, in rank order (an allgather of lengths, then of the bytes).
std::vector<std::string> allgatherText(Communicator& comm, const std::string& mine) {
  const size_t n = static_cast<size_t>(comm.size());
  const std::vector<size_t> one(n, 1);
  std::vector<int64_t> lengths(n);
  const int64_t my_length = static_cast<int64_t>(mine.size());
  comm.allgather(&my_length, 1, lengths.data(), one, DataType::kInt64);
  const std::vector<size_t> counts(lengths.begin(), lengths.end());
  std::string all(std::accumulate(counts.begin(), counts.end(), size_t{0}), '\0');
  comm.allgather(mine.data(), mine.size(), all.data(), counts, DataType::kUInt8);
  std::vector<std::string> out;
  size_t offset = 0;
  for (size_t c : counts) {
    out.push_back(all.substr(offset, c));
    offset += c;
  }
  return out;
}

}  // namespace

std::string agreeOnDepartures(Communicator& comm, const std::string& mine) {
  // Ranks with the same reason are named together: "ranks 0, 1 called shutdown()".
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  const std::vector<std::string> reasons = allgatherText(comm, mine);
  for (size_t r = 0; r < reasons.size(); ++r) {
    if (reasons[r].empty()) continue;
    auto it = groups.begin();
    while (it != groups.end() && it->first != reasons[r]) ++it;
    if (it == groups.end()) it = groups.insert(groups.end(), {reasons[r], {}});
    it->second.push_back(static_cast<int>(r));  // the process set's numbering (set 0: the job's)
  }
  std::string text = "hora has shut down:";
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [reason, ranks] = groups[g];
    text += g ? "; " : " ";
    text += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
    text += " " + reason;
  }
  return text;
}

}  // namespace hora::engine
