// A job whose processes a cluster manager started with TensorFlow's TF_CONFIG (Kubeflow's TFJob):
// ranks from the chief and worker lists, rank 0's own host:port for the store, and errors that
// name TF_CONFIG.
#include <gtest/gtest.h>

#include "bootstrap/job/job.h"
#include "bootstrap/job/tf_config.h"
#include "common/config.h"
#include "common/knobs.h"
#include "expect_error.h"

namespace hora::testing {
namespace {

std::string tfConfig(const std::string& cluster, const std::string& type, int index) {
  return R"({"cluster": )" + cluster + R"(, "task": {"type": ")" + type + R"(", "index": )" +
         std::to_string(index) + "}}";
}

const std::string kCluster = R"({"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2223"], "ps": ["p0:2222"]})";

TEST(TfConfig, TheChiefIsRankZeroAndWorkersFollowInOrder) {
  const auto chief = bootstrap::parseTfConfig(tfConfig(kCluster, "chief", 0));
  EXPECT_EQ(chief.rank, 0);
  EXPECT_EQ(chief.size, 3);
  EXPECT_EQ(chief.first_host, "c0");
  EXPECT_EQ(chief.first_port, 2222);
  EXPECT_FALSE(chief.single_host);
  EXPECT_EQ(bootstrap::parseTfConfig(tfConfig(kCluster, "worker", 1)).rank, 2);
  // Without a chief, worker 0 is rank 0 (MultiWorkerMirroredStrategy's own convention).
  const auto w = bootstrap::parseTfConfig(tfConfig(R"({"worker": ["h:1", "h:2"]})", "worker", 1));
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.size, 2);
  EXPECT_TRUE(w.single_host);
  EXPECT_EQ(w.first_port, 1);
}

TEST(TfConfig, IdentityAndRendezvousComeFromIt) {
  const auto env = common::Env::fromMap({{"TF_CONFIG", tfConfig(kCluster, "worker", 0)}});
  const Identity id = bootstrap::identityFrom(env);
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.size, 3);
  EXPECT_EQ(id.local_rank, Identity::kDerive);  // from the hostnames, as for mpirun's ranks
  const RendezvousOptions r = bootstrap::rendezvousFrom(env);
  EXPECT_EQ(r.address, "c0");
  EXPECT_EQ(r.port, 2222);
  EXPECT_FALSE(r.serve_store);
  EXPECT_FALSE(r.secret.empty());
  // HORA_* set by hand win; horarun's HORA_SIZE means horarun started the job.
  const auto by_hand = common::Env::fromMap({{"TF_CONFIG", tfConfig(kCluster, "chief", 0)},
                                             {"HORA_RENDEZVOUS_PORT", "4000"}, {"HORA_SECRET", "s"}});
  const RendezvousOptions h = bootstrap::rendezvousFrom(by_hand);
  EXPECT_EQ(h.port, 4000);
  EXPECT_EQ(h.secret, "s");
  EXPECT_TRUE(h.serve_store);
  const auto horarun = common::Env::fromMap({{"TF_CONFIG", tfConfig(kCluster, "worker", 0)}, {"HORA_SIZE", "1"}});
  EXPECT_EQ(bootstrap::identityFrom(horarun).size, 1);
}

TEST(TfConfig, MalformedOrNonTrainingTasksAreNamed) {
  expectInvalid([] { bootstrap::parseTfConfig("{not json"); }, "TF_CONFIG: not JSON");
  expectInvalid([] { bootstrap::parseTfConfig(R"({"task": {"type": "worker", "index": 0}})"); }, "no \"cluster\"");
  expectInvalid([] { bootstrap::parseTfConfig(R"({"cluster": {"worker": ["a:1"]}})"); }, "no \"task\"");
  expectInvalid([] { bootstrap::parseTfConfig(tfConfig(kCluster, "worker", 2)); }, "task index 2 is out of range for the 2 worker");
  expectInvalid([] { bootstrap::parseTfConfig(tfConfig(kCluster, "ps", 0)); }, "task type 'ps' does not train");
  expectInvalid([] { bootstrap::parseTfConfig(tfConfig(R"({"worker": ["nohost"]})", "worker", 0)); },
                "cluster entry 'nohost' is not host:port");
  expectInvalid([] { bootstrap::parseTfConfig(tfConfig(R"({"worker": ["h:99999"]})", "worker", 0)); }, "not host:port");
  expectInvalid([] { bootstrap::parseTfConfig(tfConfig(R"({"worker": [7]})", "worker", 0)); }, "non-string entry");
}

}  // namespace
}  // namespace hora::testing
