// Knob agreement (src/bootstrap/knob_agreement.h): every knob says whether ranks must agree on
// it, equal values written differently agree, and a difference fails every rank naming the
// knob, its values and the ranks holding each.
#include <gtest/gtest.h>

#include <thread>

#include "bootstrap/knob_agreement.h"
#include "common/knobs.h"
#include "expect_error.h"
#include "harness.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::testing {
namespace {

using common::Env;
using common::KnobScope;

KnobScope scopeOf(std::string_view name) { return common::knob(name).scope; }

TEST(KnobRegistry, EveryKnobIsClassified) {
  for (const auto& k : common::allKnobs())
    EXPECT_NE(k.scope, KnobScope::kUnclassified) << k.name << " does not say whether ranks must agree on it";
}

TEST(KnobRegistry, AlgorithmFusionCacheTimeoutAndTransportKnobsMustAgreeLoggingAndTimelineMayDiffer) {
  for (auto name : {"HORA_HIERARCHICAL_ALLREDUCE", "HORA_HIERARCHICAL_ALLGATHER", "HORA_HIERARCHICAL_BROADCAST",
                    "HORA_RING_THRESHOLD", "HORA_FUSION_THRESHOLD", "HORA_CACHE_CAPACITY", "HORA_TIMEOUT_SECONDS",
                    "HORA_TRANSPORT", "HORA_CHUNK_BYTES"})
    EXPECT_EQ(scopeOf(name), KnobScope::kJob) << name;
  for (auto name : {"HORA_LOG_LEVEL", "HORA_TIMELINE", "HORA_TIMELINE_MARK_CYCLES", "HORA_IFACE", "HORA_RANK",
                    "HORA_SECRET", "OMPI_COMM_WORLD_RANK"})
    EXPECT_EQ(scopeOf(name), KnobScope::kRank) << name;
}

TEST(KnobAgreement, EqualValuesWrittenDifferentlyAgreeAndPerRankKnobsAreLeftOut) {
  const std::string unset = bootstrap::jobKnobs(Env::fromMap({}));
  EXPECT_EQ(bootstrap::jobKnobs(Env::fromMap({{"HORA_FUSION_THRESHOLD", "134217728"},
                                              {"HORA_TIMEOUT_SECONDS", "30.0"},
                                              {"HORA_LOG_LEVEL", "debug"},
                                              {"HORA_TIMELINE", "/tmp/t.json"}})),
            unset);
  EXPECT_NE(unset.find("HORA_HIERARCHICAL_ALLREDUCE=auto\n"), std::string::npos) << unset;
  EXPECT_EQ(unset.find("HORA_LOG_LEVEL"), std::string::npos) << unset;
  // A Horovod alias is the knob.
  EXPECT_EQ(bootstrap::jobKnobs(Env::fromMap({{"HOROVOD_CACHE_CAPACITY", "0"}})),
            bootstrap::jobKnobs(Env::fromMap({{"HORA_CACHE_CAPACITY", "0"}})));
}

TEST(KnobAgreement, TheMessageNamesEachKnobItsValuesAndTheRanksHoldingThem) {
  const std::string flat = bootstrap::jobKnobs(Env::fromMap({{"HORA_HIERARCHICAL_ALLREDUCE", "0"}}));
  const std::string deflt = bootstrap::jobKnobs(Env::fromMap({}));
  const std::string small = bootstrap::jobKnobs(Env::fromMap({{"HORA_HIERARCHICAL_ALLREDUCE", "0"},
                                                              {"HORA_CACHE_CAPACITY", "8"}}));
  const auto label = [](int r) { return r; };
  EXPECT_EQ(bootstrap::describeDisagreement({deflt, deflt, deflt}, label), "");
  const std::string m = bootstrap::describeDisagreement({flat, flat, deflt, deflt, deflt, small}, label);
  EXPECT_NE(m.find("HORA_HIERARCHICAL_ALLREDUCE is '0' on ranks 0-1, 5 but 'auto' (the default) on ranks 2-4"),
            std::string::npos) << m;
  EXPECT_NE(m.find("HORA_CACHE_CAPACITY is '1024' (the default) on ranks 0-4 but '8' on rank 5"), std::string::npos)
      << m;
  EXPECT_NE(m.find("-x NAME=VALUE"), std::string::npos) << m;
}

// The protocol over a real store, ranks as threads: every rank fails alike, naming the knob.
std::vector<std::string> agree(const std::vector<std::map<std::string, std::string>>& envs) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  const int size = static_cast<int>(envs.size());
  std::vector<std::string> errors(envs.size());
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      const auto deadline = common::Deadline::after(std::chrono::seconds(10));
      rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, deadline);
      try {
        bootstrap::agreeOnKnobs(store, "comm0/", r, size, bootstrap::jobKnobs(Env::fromMap(envs[size_t(r)])),
                                [](int x) { return x; }, deadline);
      } catch (const InvalidArgumentError& e) {
        errors[size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  return errors;
}

TEST(KnobAgreement, RanksThatAgreeGoOn) {
  for (const auto& e : agree({{{"HORA_LOG_LEVEL", "debug"}}, {}, {{"HORA_FUSION_THRESHOLD", "128M"}}}))
    EXPECT_EQ(e, "");
}

TEST(KnobAgreement, ADifferenceFailsEveryRankNamingTheKnobValuesAndRanks) {
  const auto errors = agree({{}, {}, {{"HORA_HIERARCHICAL_ALLREDUCE", "0"}}, {{"HORA_HIERARCHICAL_ALLREDUCE", "0"}}});
  for (int r = 0; r < 4; ++r) {
    const std::string& e = errors[size_t(r)];
    EXPECT_EQ(e.rfind("rank " + std::to_string(r) + ": ", 0), 0u) << e;
    EXPECT_NE(e.find("HORA_HIERARCHICAL_ALLREDUCE is '0' on ranks 2-3 but 'auto' (the default) on ranks 0-1"),
              std::string::npos) << e;
  }
}

}  // namespace
}  // namespace hora::testing
