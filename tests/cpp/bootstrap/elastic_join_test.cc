// An elastic worker's join (src/bootstrap/job/elastic_join.h) against a real store, with the test
// playing horarun's driver: workers are placed generation by generation and form working
// communicators under each generation's prefix; a removed worker and an unanswered join end in
// their typed errors; a rank of another generation cannot complete the TCP handshake.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "bootstrap/job/elastic_join.h"
#include "harness.h"
#include "hora/communicator.h"
#include "hora/errors.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_server.h"
#include "transport/tcp/tcp_connect.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

// Plays the driver: waits for each worker's join and answers it with `answers[i]`.
void answerJoins(int port, const std::vector<std::string>& workers, const std::vector<std::string>& answers,
                 const std::vector<std::string>& previous_nonces) {
  const auto d = common::Deadline::after(20s);
  rendezvous::TcpStore store("127.0.0.1", port, kTestSecret, d);
  for (size_t i = 0; i < workers.size(); ++i) {
    std::string nonce;
    do {
      nonce = store.get(bootstrap::elasticJoinKey(workers[i]), d);
      if (nonce == previous_nonces[i]) std::this_thread::sleep_for(5ms);
    } while (nonce == previous_nonces[i] && !d.expired());
    store.set(bootstrap::elasticAnswerKey(workers[i], nonce), answers[i], d);
  }
}

// Joins as `worker` and allreduces (rank + 1) over the generation's communicator.
std::pair<bootstrap::ElasticPlace, float> joinAndSum(int port, const std::string& worker) {
  const auto d = common::Deadline::after(20s);
  rendezvous::TcpStore store("127.0.0.1", port, kTestSecret, d);
  const bootstrap::ElasticPlace place = bootstrap::joinNextGeneration(store, worker, d);
  Identity id;
  id.rank = place.rank;
  id.size = place.size;
  id.local_rank = place.rank;
  id.local_size = place.size;
  id.hostname = "localhost";
  auto comm = Communicator::create(
      id, {"127.0.0.1", port, kTestSecret, bootstrap::generationPrefix(place.generation)}, testOptions());
  float x = static_cast<float>(place.rank + 1), sum = 0;
  comm->allreduce(&x, &sum, 1, DataType::kFloat32, {});
  return {place, sum};
}

TEST(ElasticJoin, WorkersArePlacedGenerationByGenerationAndEachGenerationsRingWorks) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  const std::vector<std::string> workers{"h:0", "h:1", "h:2"};
  // Generation 0: three workers.
  std::vector<std::pair<bootstrap::ElasticPlace, float>> got(3);
  {
    std::thread driver(answerJoins, server.port(), workers, std::vector<std::string>{"0 2 3", "0 0 3", "0 1 3"},
                       std::vector<std::string>{"", "", ""});
    std::vector<std::thread> ts;
    for (size_t i = 0; i < 3; ++i) ts.emplace_back([&, i] { got[i] = joinAndSum(server.port(), workers[i]); });
    for (auto& t : ts) t.join();
    driver.join();
  }
  EXPECT_EQ(got[0].first.rank, 2);
  EXPECT_EQ(got[1].first.rank, 0);
  for (const auto& [place, sum] : got) {
    EXPECT_EQ(place.generation, 0);
    EXPECT_EQ(place.size, 3);
    EXPECT_EQ(sum, 1 + 2 + 3);
  }
  // Generation 1: h:2 is gone; the two others re-join in the same process and form a new ring.
  rendezvous::TcpStore reader("127.0.0.1", server.port(), kTestSecret, common::Deadline::after(5s));
  const std::vector<std::string> last{reader.get(bootstrap::elasticJoinKey("h:0"), common::Deadline::after(5s)),
                                      reader.get(bootstrap::elasticJoinKey("h:1"), common::Deadline::after(5s))};
  std::thread driver(answerJoins, server.port(), std::vector<std::string>{"h:0", "h:1"},
                     std::vector<std::string>{"1 1 2", "1 0 2"}, last);
  std::vector<std::pair<bootstrap::ElasticPlace, float>> again(2);
  std::thread a([&] { again[0] = joinAndSum(server.port(), "h:0"); });
  std::thread b([&] { again[1] = joinAndSum(server.port(), "h:1"); });
  a.join();
  b.join();
  driver.join();
  for (const auto& [place, sum] : again) {
    EXPECT_EQ(place.generation, 1);
    EXPECT_EQ(place.size, 2);
    EXPECT_EQ(sum, 1 + 2);
  }
}

TEST(ElasticJoin, ARemovedWorkerGetsWorkerRemovedErrorWithTheDriversReason) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  std::thread driver(answerJoins, server.port(), std::vector<std::string>{"b:0"},
                     std::vector<std::string>{"removed its host b was removed from the job"},
                     std::vector<std::string>{""});
  const auto d = common::Deadline::after(10s);
  rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
  try {
    bootstrap::joinNextGeneration(store, "b:0", d);
    ADD_FAILURE() << "a removed worker was placed";
  } catch (const WorkerRemovedError& e) {
    EXPECT_NE(std::string(e.what()).find("its host b was removed"), std::string::npos) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kRemoved);
  }
  driver.join();
}

TEST(ElasticJoin, AnUnansweredJoinTimesOutNamingTheWorkerAndTheKnob) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  const auto d = common::Deadline::after(1s);
  rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, common::Deadline::after(5s));
  try {
    bootstrap::joinNextGeneration(store, "a:3", d);
    ADD_FAILURE() << "an unanswered join returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("a:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HORA_ELASTIC_TIMEOUT_SECONDS"), std::string::npos) << e.what();
  }
}

TEST(ElasticJoin, AnAnswerThatCannotBeReadIsAPeerError) {
  EXPECT_THROW(bootstrap::parsePlace("1 2", "w"), PeerError);
  EXPECT_THROW(bootstrap::parsePlace("1 2 2", "w"), PeerError);  // rank outside the size
  EXPECT_THROW(bootstrap::parsePlace("x 0 1", "w"), PeerError);
  EXPECT_EQ(bootstrap::parsePlace("4 1 3", "w").generation, 4);
}

TEST(ElasticJoin, ARankOfAnotherGenerationCannotCompleteTheHandshake) {
  rendezvous::TcpStoreServer server("127.0.0.1", 0, kTestSecret);
  std::thread rank0([&] {
    const auto d = common::Deadline::after(3s);
    rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
    transport::tcp::MeshOptions o{0, 2, kTestSecret, "127.0.0.1", bootstrap::generationPrefix(1)};
    // Nobody of generation 1 comes: the stale peer is dropped and the wait times out.
    EXPECT_THROW(transport::tcp::connectMesh(o, store, d), TimeoutError);
  });
  const auto d = common::Deadline::after(3s);
  rendezvous::TcpStore store("127.0.0.1", server.port(), kTestSecret, d);
  // A worker still in generation 0 that somehow holds rank 0's new address.
  store.set(bootstrap::generationPrefix(0) + "tcp/0", store.get(bootstrap::generationPrefix(1) + "tcp/0", d), d);
  transport::tcp::MeshOptions stale{1, 2, kTestSecret, "127.0.0.1", bootstrap::generationPrefix(0)};
  try {
    transport::tcp::connectMesh(stale, store, d);
    ADD_FAILURE() << "a rank of generation 0 joined generation 1's ring";
  } catch (const AuthenticationError& e) {
    // Both generations named: the peer's and this rank's.
    EXPECT_NE(std::string(e.what()).find("elastic generation 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("elastic generation 0"), std::string::npos) << e.what();
  }
  rank0.join();
}

}  // namespace
}  // namespace hora::testing
