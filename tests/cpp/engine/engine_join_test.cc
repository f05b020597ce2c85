// Join, barrier and process sets with real ranks: uneven data averaged over every rank (the
// joined ones' zeros included, as Horovod's), a join while cached names run and the timeline
// records, collectives that cannot go on with joined ranks (at once, whatever their names), and
// sets that negotiate apart.
#include <gtest/gtest.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "engine/timeline.h"
#include "engine_test_util.h"
#include "hora/errors.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

TEST(Engine, JoinWithUnevenDataAveragesOverEveryRank) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    const int my_steps = 3 + 2 * r;  // 3, 5, 7 steps: rank 2 runs out of data last
    const auto contributors = [](int step) {
      std::vector<int> c;
      for (int x = 0; x < 3; ++x)
        if (step < 3 + 2 * x) c.push_back(x);
      return c;
    };
    for (int round = 0; round < 2; ++round) {  // the joined state starts afresh after a join
      for (int step = 0; step < my_steps; ++step) {
        std::vector<std::vector<float>> small(6, std::vector<float>(5));
        std::vector<float> big(600000), sum(3);
        std::vector<Handle> hs;
        const float mine = static_cast<float>((r + 1) * (step + 1));
        for (int t = 0; t < 6; ++t)
          hs.push_back(submitFilled(e, indexed("small.", t), small[static_cast<size_t>(t)], mine, ReduceOp::kAverage));
        hs.push_back(submitFilled(e, "big", big, mine, ReduceOp::kAverage));
        hs.push_back(submitFilled(e, "sum", sum, mine, ReduceOp::kSum));
        for (auto& h : hs) h.wait(30s);
        float total = 0;
        const auto c = contributors(step);
        for (int x : c) total += static_cast<float>((x + 1) * (step + 1));
        const float average = total / 3.0f;  // the joined ranks' zeros count (Horovod's Average)
        for (const auto& t : small) ASSERT_FLOAT_EQ(t[0], average) << "round " << round << " step " << step;
        ASSERT_FLOAT_EQ(big[0], average);
        ASSERT_FLOAT_EQ(big.back(), average);
        ASSERT_EQ(sum[2], total);
      }
      int32_t last = -1;
      e.join(&last).wait(30s);
      EXPECT_EQ(last, 2);
    }
  }));
}

// The joined rank records the timeline (Horovod's tests set HOROVOD_TIMELINE): its join has no
// algorithm to name, which used to throw on its engine thread and leave the other ranks waiting
// for it forever. The other ranks' two names are in the response cache, as in Horovod's test.
TEST(Engine, JoinWhileCachedNamesRunAndTheTimelineRecords) {
  const std::string path = "/tmp/hora-join-timeline-" + std::to_string(::getpid()) + ".json";
  EngineOptions o;
  o.timeline = path;
  o.timeline_all_ranks = true;
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    std::vector<float> a(5), b(17);
    for (int first = 0; first < 3; ++first) {
      submitFilled(e, "tensor_a", a, 1, ReduceOp::kSum).wait(30s);  // negotiated, then cached
      submitFilled(e, "tensor_b", b, 1, ReduceOp::kSum).wait(30s);
      int32_t last = -1;
      if (r != first) {
        Handle ha = submitFilled(e, "tensor_a", a, static_cast<float>(r + 1), ReduceOp::kAverage);
        Handle hb = submitFilled(e, "tensor_b", b, static_cast<float>(r + 1), ReduceOp::kAverage);
        ha.wait(30s);
        hb.wait(30s);
        float sum = 0;
        for (int x = 0; x < 3; ++x) sum += x == first ? 0.0f : static_cast<float>(x + 1);
        EXPECT_FLOAT_EQ(a[0], sum / 3) << "first to join: " << first;
        EXPECT_FLOAT_EQ(b[16], sum / 3) << "first to join: " << first;
      }
      e.join(&last).wait(30s);
      EXPECT_NE(last, first);
    }
  }, o));
  for (int r = 0; r < 3; ++r) std::remove(engine::timelinePathFor(path, r, true).c_str());
}

TEST(Engine, JoinFailsOtherCollectivesWhileARankHasJoinedThenCompletes) {
  expectNoErrors(runEngines(2, [](Engine& e) {
    int32_t last = -1;
    if (e.identity().rank == 1) {
      e.join(&last).wait(30s);
    } else {
      std::vector<float> x(4, 1.0f);
      Request b;
      b.name = "weights";
      b.op = CollectiveKind::kBroadcast;
      b.shape = {4};
      b.input = b.output = x.data();
      try {
        e.enqueue(b).wait(30s);
        ADD_FAILURE() << "broadcast ran while rank 1 had joined";
      } catch (const MismatchError& err) {
        EXPECT_NE(std::string(err.what()).find("broadcast cannot run while rank(s) 1 have joined"), std::string::npos)
            << err.what();
      }
      e.barrier().wait(30s);  // a barrier goes on with the joined rank
      e.join(&last).wait(30s);
    }
    EXPECT_EQ(last, 0);
  }));
}

// The ranks that did not join may even disagree on the name (unnamed tensors are numbered per
// rank, and the joined rank skipped one): neither name can ever complete, so each fails at once
// instead of waiting for the others. Once through the response cache too.
TEST(Engine, JoinFailsAllgathersOfDifferentNamesAtOnce) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    std::vector<float> x(4, 1.0f);
    const auto allgather = [&](const std::string& name) {
      Request g;
      g.name = name;
      g.op = CollectiveKind::kAllgather;
      g.shape = {4};
      g.input = x.data();
      g.allocate_output = [out = std::make_shared<std::vector<float>>()](const std::vector<int64_t>& shape) {
        out->resize(static_cast<size_t>(shape[0]));
        return static_cast<void*>(out->data());
      };
      return e.enqueue(g);
    };
    for (const char* cached : {"gather", "gather.1"}) allgather(cached).wait(30s);  // into the cache
    int32_t last = -1;
    if (r == 0) {
      e.join(&last).wait(30s);
    } else {
      const auto started = std::chrono::steady_clock::now();
      try {
        allgather(r == 1 ? "gather" : "gather.1").wait(30s);
        ADD_FAILURE() << "allgather ran while rank 0 had joined";
      } catch (const MismatchError& err) {
        EXPECT_NE(std::string(err.what()).find("allgather cannot run while rank(s) 0 have joined"), std::string::npos)
            << err.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
      e.join(&last).wait(30s);
    }
    EXPECT_NE(last, 0);
  }));
}

TEST(Engine, BarrierReturnsOnlyAfterEveryRankEnteredIt) {
  std::atomic<int64_t> last_entry{0};
  std::vector<int64_t> exits(3);
  const auto now = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  expectNoErrors(runEngines(3, [&](Engine& e) {
    const int r = e.identity().rank;
    for (int round = 0; round < 3; ++round) {  // later rounds come from the response cache
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
      int64_t t = now(), seen = last_entry.load();
      while (t > seen && !last_entry.compare_exchange_weak(seen, t)) {}
      e.barrier().wait(30s);
      exits[static_cast<size_t>(r)] = now();
      EXPECT_GE(exits[static_cast<size_t>(r)], last_entry.load()) << "round " << round;
      e.barrier().wait(30s);  // nobody starts the next round's entry before everyone checked
    }
  }));
}

TEST(Engine, ProcessSetsNegotiateApartAndDoNotBlockEachOther) {
  std::atomic<int> low_done{0};  // ranks 0 and 1 finished their set's steps
  expectNoErrors(runEngines(4, [&](Engine& e) {
    const int r = e.identity().rank;
    const int low = e.addProcessSet({0, 1});
    const int high = e.addProcessSet({2, 3});
    const int odd = e.addProcessSet({1, 3});
    EXPECT_EQ(e.processSetRanks(odd), (std::vector<int>{1, 3}));
    EXPECT_EQ(e.processSetIds(), (std::vector<int>{0, low, high, odd}));
    const int mine = r < 2 ? low : high;

    // Rank 3 holds back a world allreduce; the sets' own collectives go on meanwhile.
    std::vector<float> world(1), local(1), big(600000);
    if (r == 3) {  // until the low set is through (bounded: a failure must not hang the test)
      for (int i = 0; i < 6000 && low_done.load() < 2; ++i) std::this_thread::sleep_for(10ms);
    }
    Handle slow = submitFilled(e, "world", world, static_cast<float>(r + 1), ReduceOp::kSum);
    for (int step = 0; step < 20; ++step) {
      submitFilled(e, "local", local, static_cast<float>(r + step), ReduceOp::kSum, mine).wait(30s);
      const float want = r < 2 ? static_cast<float>(0 + 1 + 2 * step) : static_cast<float>(2 + 3 + 2 * step);
      ASSERT_EQ(local[0], want) << "step " << step;
      submitFilled(e, "big", big, static_cast<float>(r), ReduceOp::kAverage, mine).wait(30s);
      ASSERT_EQ(big[0], r < 2 ? 0.5f : 2.5f);
    }
    if (r < 2) {
      EXPECT_FALSE(slow.poll()) << "the world allreduce finished before rank 3 submitted it";
      ++low_done;
    }
    slow.wait(30s);
    EXPECT_EQ(world[0], 10.0f);

    // Broadcast's root is a rank of the set: root 1 of {1, 3} is global rank 3.
    if (r == 1 || r == 3) {
      std::vector<int32_t> v(3, r);
      Request b;
      b.name = "from.set.root";
      b.op = CollectiveKind::kBroadcast;
      b.type = DataType::kInt32;
      b.shape = {3};
      b.input = b.output = v.data();
      b.root = 1;
      b.process_set = odd;
      e.enqueue(b).wait(30s);
      EXPECT_EQ(v, (std::vector<int32_t>(3, 3)));
    } else {
      std::vector<float> x(1);
      try {
        submitFilled(e, "not.mine", x, 1, ReduceOp::kSum, odd).wait(30s);
        ADD_FAILURE() << "a non-member used process set " << odd;
      } catch (const InvalidArgumentError& err) {
        EXPECT_NE(std::string(err.what()).find("is not a member of process set"), std::string::npos) << err.what();
      }
    }
    e.removeProcessSet(odd);
    EXPECT_THROW(submitFilled(e, "gone", world, 1, ReduceOp::kSum, odd).wait(30s), InvalidArgumentError);
    EXPECT_THROW(e.processSetRanks(odd), InvalidArgumentError);
    // Sets added later get fresh connections; a set of one rank is local.
    const int alone = e.addProcessSet({2});
    if (r == 2) {
      submitFilled(e, "solo", local, 7, ReduceOp::kSum, alone).wait(30s);
      EXPECT_EQ(local[0], 7.0f);
    }
  }));
}

TEST(Engine, RemovedProcessSetIdsAreGivenOutAgainOldestFirst) {
  expectNoErrors(runEngines(3, [](Engine& e) {
    const int r = e.identity().rank;
    const int a = e.addProcessSet({0, 1});
    const int b = e.addProcessSet({1, 2});
    const int c = e.addProcessSet({0, 2});
    EXPECT_EQ((std::vector<int>{a, b, c}), (std::vector<int>{1, 2, 3}));
    e.removeProcessSet(b);
    e.removeProcessSet(a);
    // A failed add takes no id: b, the first freed, is still next.
    EXPECT_THROW(e.addProcessSet({0, 3}), InvalidArgumentError);
    const int again = e.addProcessSet({0, 1});  // the ranks of a, under b's id
    const int then = e.addProcessSet({1, 2});
    const int fresh = e.addProcessSet({0});
    EXPECT_EQ((std::vector<int>{again, then, fresh}), (std::vector<int>{b, a, 4}));
    EXPECT_EQ(e.processSetRanks(again), (std::vector<int>{0, 1}));
    EXPECT_EQ(e.processSetRanks(then), (std::vector<int>{1, 2}));
    // The reused ids' sets are connected anew: their collectives reach their own members.
    std::vector<float> x(1000);
    if (r < 2) {
      submitFilled(e, "again", x, static_cast<float>(r + 1), ReduceOp::kSum, again).wait(30s);
      EXPECT_EQ(x[999], 3.0f);
    }
    if (r > 0) {
      submitFilled(e, "then", x, static_cast<float>(r + 1), ReduceOp::kSum, then).wait(30s);
      EXPECT_EQ(x[999], 5.0f);
    }
  }));
}

TEST(Engine, ProcessSetArgumentsThatDifferBetweenRanksFailOnEveryRank) {
  const auto errors = runEngines(3, [](Engine& e) {
    e.addProcessSet(e.identity().rank == 1 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
  });
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find("add_process_set.1: the ranks passed different arguments"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  const auto counts = runEngines(2, [](Engine& e) {
    e.addProcessSet(e.identity().rank == 1 ? std::vector<int>{0} : std::vector<int>{0, 1});
  });
  for (size_t r = 0; r < counts.size(); ++r)
    EXPECT_NE(counts[r].find("Mismatched shapes for tensor 'hora.add_process_set.1'"), std::string::npos)
        << "rank " << r << ": " << counts[r];
}

}  // namespace
}  // namespace hora::testing
