// The engine's timeline: valid Chrome trace JSON on every rank, even cut short, and switched at
// run time.
#include <gtest/gtest.h>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "engine/timeline.h"
#include "engine_test_util.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

nlohmann::json readTrace(const std::string& path, bool complete) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string body = text.str();
  if (!complete) body += "\n]";  // what a viewer does with a file cut short
  return nlohmann::json::parse(body);
}

TEST(Engine, TimelineOfEveryRankIsValidChromeTraceJson) {
  const std::string base = "/tmp/hora-timeline-test-" + std::to_string(::getpid()) + ".json";
  EngineOptions o;
  o.timeline = base;
  o.timeline_mark_cycles = true;
  o.timeline_all_ranks = true;
  o.fusion_threshold = 1 << 20;
  std::vector<nlohmann::json> partial(2);
  expectNoErrors(runEngines(2, [&](Engine& e) {
    std::mt19937 rng(3);
    submitAndCheck(e, 3, 20, 1, 1000, rng);
    std::vector<float> big(300000, 1.0f), gathered;
    Request g;
    g.name = "gathered";
    g.op = CollectiveKind::kAllgather;
    g.shape = {static_cast<int64_t>(big.size())};
    g.input = big.data();
    g.allocate_output = [&](const std::vector<int64_t>& shape) {
      gathered.resize(static_cast<size_t>(shape[0]));
      return gathered.data();
    };
    e.enqueue(g).wait(30s);
    // While running, the file lacks only its closing bracket.
    partial[static_cast<size_t>(e.identity().rank)] =
        readTrace(engine::timelinePathFor(base, e.identity().rank, true), false);
  }, o));
  for (int r = 0; r < 2; ++r) {
    const auto path = engine::timelinePathFor(base, r, true);
    EXPECT_FALSE(partial[static_cast<size_t>(r)].empty());
    const auto trace = readTrace(path, true);
    std::set<std::string> names;
    std::map<int, int> depth;  // per lane: begins minus ends
    for (const auto& ev : trace) {
      if (ev.contains("name")) names.insert(ev["name"].get<std::string>());
      EXPECT_EQ(ev["pid"], r);
      if (ev["ph"] == "B") ++depth[ev["tid"].get<int>()];
      if (ev["ph"] == "E") --depth[ev["tid"].get<int>()];
    }
    for (const char* want : {"NEGOTIATE_ALLREDUCE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE",
                             "MEMCPY_OUT_FUSION_BUFFER", "NEGOTIATE_ALLGATHER", "ALLGATHER", "CYCLE_START",
                             "rank 0 ready", "rank 1 ready", "thread_name", "process_name"})
      EXPECT_TRUE(names.count(want)) << "rank " << r << " timeline lacks " << want;
    for (const auto& [lane, d] : depth) EXPECT_EQ(d, 0) << "unbalanced begin/end on lane " << lane;
    std::remove(path.c_str());
  }
}

TEST(Engine, TimelineStartsAndStopsAtRunTime) {
  const std::string path = "/tmp/hora-timeline-runtime-" + std::to_string(::getpid()) + ".json";
  expectNoErrors(runEngines(2, [&](Engine& e) {
    std::mt19937 rng(5);
    submitAndCheck(e, 1, 5, 1, 10, rng);  // before: not recorded
    e.startTimeline(path);
    submitAndCheck(e, 1, 5, 1, 10, rng);
    e.stopTimeline();
    submitAndCheck(e, 1, 5, 1, 10, rng);
  }));
  const auto trace = readTrace(path, true);  // closed by stopTimeline: complete JSON
  int allreduces = 0;
  for (const auto& ev : trace)
    if (ev.contains("name") && ev["name"] == "ALLREDUCE") ++allreduces;
  EXPECT_GE(allreduces, 1);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hora::testing
