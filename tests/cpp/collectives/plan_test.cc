// The planner and the topology it reads: pure functions, tested without a job.
#include <gtest/gtest.h>

#include "bootstrap/topology.h"
#include "collectives/plan.h"

namespace hora::collectives {
namespace {

constexpr size_t KiB = 1024;

GroupShape tcpRanks(int n) { return {n, false, false, true}; }
GroupShape shmRanks(int n) { return {n, true, false, true}; }
GroupShape twoHostsOfTwo(bool placed_by_host) { return {4, false, true, placed_by_host}; }

Algorithm algorithmOf(CollectiveKind op, size_t count, size_t bytes, ReduceOp reduce, const GroupShape& g,
                      const CommunicatorOptions& o = {}) {
  return plan(op, count, bytes, reduce, g, o).algorithm;
}

TEST(Plan, OneRankIsLocalWhateverTheCollective) {
  for (CollectiveKind op : {CollectiveKind::kAllreduce, CollectiveKind::kAllgather, CollectiveKind::kBroadcast, CollectiveKind::kReducescatter,
                    CollectiveKind::kAlltoall, CollectiveKind::kBarrier})
    EXPECT_EQ(algorithmOf(op, 1 << 20, 4 << 20, ReduceOp::kSum, tcpRanks(1)), Algorithm::kLocal);
}

TEST(Plan, AllreduceTakesTheLatencyOptimalAlgorithmUpToTheThresholdOfItsTransport) {
  CommunicatorOptions o;
  o.ring_threshold_bytes = 512 * KiB;
  o.shm_ring_threshold_bytes = 4 * KiB;
  const auto sum = ReduceOp::kSum;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1024, 4 * KiB, sum, tcpRanks(3), o), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 2048, 8 * KiB, sum, tcpRanks(3), o), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 2048, 8 * KiB, sum, shmRanks(3), o), Algorithm::kRing);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1 << 20, 4 << 20, sum, tcpRanks(3), o), Algorithm::kRing);
  // Min and max: dissemination, which needs no fold steps.
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 16, 64, ReduceOp::kMax, tcpRanks(3), o), Algorithm::kDissemination);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 16, 64, ReduceOp::kMin, shmRanks(5), o), Algorithm::kDissemination);
  // Fewer elements than ranks: the ring has nothing to give some ranks, whatever the bytes.
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 2, 4 << 20, sum, tcpRanks(3), o), Algorithm::kRecursiveDoubling);
}

TEST(Plan, AcrossEvenHostsLargeAllreducesGoThroughTheHierarchyUnlessTurnedOff) {
  CommunicatorOptions o;
  const size_t large = o.ring_threshold_bytes + 4;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, large / 4, large, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kHierarchical);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 16, 64, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kRecursiveDoubling);
  o.hierarchical = HierarchyChoice::kAlways;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 16, 64, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kHierarchical);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 3, 12, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kRecursiveDoubling);  // an element per rank is needed even when forced
  o.hierarchical = HierarchyChoice::kNever;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, large / 4, large, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kRing);
  // Uneven hosts never take it.
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, large / 4, large, ReduceOp::kSum, tcpRanks(4), o), Algorithm::kRing);
}

TEST(Plan, BroadcastAcrossHostsIsHierarchicalOnlyWhenTheFlatChainWouldCrossALinkTwice) {
  CommunicatorOptions o;
  EXPECT_EQ(algorithmOf(CollectiveKind::kBroadcast, 1 << 20, 1 << 20, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kChain);
  EXPECT_EQ(algorithmOf(CollectiveKind::kBroadcast, 1 << 20, 1 << 20, ReduceOp::kSum, twoHostsOfTwo(false), o),
            Algorithm::kHierarchical);
  EXPECT_EQ(algorithmOf(CollectiveKind::kBroadcast, 4, 4, ReduceOp::kSum, tcpRanks(4), o), Algorithm::kBinomialTree);
  o.hierarchical_broadcast = HierarchyChoice::kAlways;
  EXPECT_EQ(algorithmOf(CollectiveKind::kBroadcast, 4, 4, ReduceOp::kSum, twoHostsOfTwo(true), o), Algorithm::kHierarchical);
}

TEST(Plan, TheOtherCollectivesHaveOneFlatAlgorithmEach) {
  CommunicatorOptions o;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllgather, 4, 4, ReduceOp::kSum, twoHostsOfTwo(true), o), Algorithm::kHierarchical);
  o.hierarchical_allgather = HierarchyChoice::kNever;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllgather, 4, 4, ReduceOp::kSum, twoHostsOfTwo(true), o), Algorithm::kRing);
  EXPECT_EQ(algorithmOf(CollectiveKind::kReducescatter, 4, 4, ReduceOp::kSum, twoHostsOfTwo(true), o), Algorithm::kRing);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAlltoall, 4, 4, ReduceOp::kSum, shmRanks(2), o), Algorithm::kPairwise);
  EXPECT_EQ(algorithmOf(CollectiveKind::kBarrier, 0, 0, ReduceOp::kSum, shmRanks(2), o), Algorithm::kDissemination);
}

TEST(Plan, AdasumRunsFlatAtAnySizeEvenWhereASumWouldTakeTheHierarchy) {
  CommunicatorOptions o;
  o.hierarchical = HierarchyChoice::kAlways;
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1 << 20, 4 << 20, ReduceOp::kSum, twoHostsOfTwo(true), o),
            Algorithm::kHierarchical);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1 << 20, 4 << 20, ReduceOp::kAdasum, twoHostsOfTwo(true), o),
            Algorithm::kAdasum);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1, 4, ReduceOp::kAdasum, shmRanks(2), o), Algorithm::kAdasum);
  EXPECT_EQ(algorithmOf(CollectiveKind::kAllreduce, 1, 4, ReduceOp::kAdasum, shmRanks(1), o), Algorithm::kLocal);
}

TEST(Plan, TheDescriptionNamesTheAlgorithmAndTheTransport) {
  EXPECT_EQ(describe(CollectiveKind::kAllreduce, {Algorithm::kRing}, "tcp"), "ring over tcp");
  EXPECT_EQ(describe(CollectiveKind::kBroadcast, {Algorithm::kBinomialTree}, "shared memory"),
            "binomial tree over shared memory");
  EXPECT_EQ(describe(CollectiveKind::kAllreduce, {Algorithm::kLocal}, "tcp"), "local");
  EXPECT_EQ(describe(CollectiveKind::kAllreduce, {Algorithm::kHierarchical}, "shared memory + tcp"),
            "hierarchical (reduce-scatter, allreduce across hosts, allgather)");
  EXPECT_EQ(describe(CollectiveKind::kAllgather, {Algorithm::kHierarchical}, "shared memory + tcp"),
            "hierarchical (allgather across hosts, then inside each)");
  EXPECT_EQ(describe(CollectiveKind::kAllreduce, {Algorithm::kAdasum}, "shared memory"),
            "adasum (vector-halving, distance-doubling) over shared memory");
}

TEST(Topology, EvenHostsNeedSeveralHostsWithTheSameNumberOfRanksAboveOne) {
  EXPECT_TRUE((bootstrap::Topology{{"a", "a", "b", "b"}}).evenHosts());
  EXPECT_TRUE((bootstrap::Topology{{"a", "b", "a", "b"}}).evenHosts());
  EXPECT_FALSE((bootstrap::Topology{{"a", "a", "b"}}).evenHosts());
  EXPECT_FALSE((bootstrap::Topology{{"a", "b", "c"}}).evenHosts());  // one rank per host: nothing to share
  EXPECT_FALSE((bootstrap::Topology{{"a", "a", "a"}}).evenHosts());
  EXPECT_FALSE((bootstrap::Topology{}).evenHosts());
}

TEST(Topology, PlacedByHostMeansEveryHostsRanksAreConsecutive) {
  EXPECT_TRUE((bootstrap::Topology{{"a", "a", "b", "b"}}).placedByHost());
  EXPECT_FALSE((bootstrap::Topology{{"a", "b", "a", "b"}}).placedByHost());
  EXPECT_TRUE((bootstrap::Topology{{"a", "a", "b"}}).placedByHost());
  const auto by_host = bootstrap::Topology{{"b", "a", "b"}}.ranksByHost();
  EXPECT_EQ(by_host.at("a"), (std::vector<int>{1}));
  EXPECT_EQ(by_host.at("b"), (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace hora::collectives
