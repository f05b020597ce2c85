// Who may spin (Note [who may spin]) and when spinning pays (Note [spin, then block]).
#include <gtest/gtest.h>

#include <thread>

#include "common/cpu_share.h"
#include "transport/peer_group.h"

namespace hora::testing {
namespace {

using common::CpuShare;
using Mode = CpuShare::Mode;
using namespace std::chrono_literals;

TEST(CpuShare, BusyPollsOnlyWhereEveryRankHasACoreForIt) {
  EXPECT_EQ(CpuShare::decide(2, 2, 0), Mode::kBusyPoll);   // 2 ranks waiting, 2 cores
  EXPECT_EQ(CpuShare::decide(8, 2, 3), Mode::kBusyPoll);   // 2 x (3 compute + 1) = 8
  EXPECT_EQ(CpuShare::decide(8, 2, 4), Mode::kBlock);      // 2 x 5 > 8: compute keeps the cores
}

TEST(CpuShare, TrainingOnEveryCoreBlocksAndAWaitingFrontendOnlyYields) {
  EXPECT_EQ(CpuShare::decide(2, 2, 1), Mode::kBlock);   // the backward pass runs: leave the cores
  EXPECT_EQ(CpuShare::decide(2, 4, 0), Mode::kYield);   // 4 ranks on 2 cores, all waiting for hora
  EXPECT_EQ(CpuShare::decide(2, 4, 1), Mode::kBlock);
}

TEST(CpuShare, AFrontendWaitCountsWhileItLasts) {
  CpuShare& share = CpuShare::process();
  share.noteLocalRanks(share.cores());  // one rank per core
  share.setComputeThreads(2);           // its main thread and an intra-op worker
  share.noteEngine(+1);
  EXPECT_EQ(share.mode(), Mode::kBlock) << "compute runs";
  {
    CpuShare::FrontendWait blocked;
    EXPECT_EQ(share.mode(), Mode::kBusyPoll) << "the frontend waits, and its workers with it";
  }
  EXPECT_NE(share.mode(), Mode::kBusyPoll);
  share.noteEngine(-1);
  EXPECT_EQ(share.mode(), Mode::kBusyPoll) << "without an engine the caller is the one waiting";
}

TEST(SpinHistory, StopsSpinningAfterLongWaitsAndResumesAfterShortOnes) {
  transport::SpinHistory history;
  EXPECT_TRUE(history.worthSpinning());
  for (int i = 0; i < 20; ++i) history.record(10us, 1000us);
  EXPECT_TRUE(history.worthSpinning()) << "short waits";
  for (int i = 0; i < 5; ++i) history.record(5ms, 1000us);
  EXPECT_FALSE(history.worthSpinning()) << "waits longer than the spin";
  history.record(10us, 1000us);
  EXPECT_FALSE(history.worthSpinning()) << "one short wait after long ones";
  for (int i = 0; i < 5; ++i) history.record(10us, 1000us);
  EXPECT_TRUE(history.worthSpinning()) << "short waits again";
}

TEST(Spinner, BlocksAtOnceWhenComputeThreadsNeedTheCores) {
  CpuShare& share = CpuShare::process();
  share.noteLocalRanks(share.cores());
  share.setComputeThreads(share.cores());  // every core computes
  share.noteEngine(+1);
  transport::SpinHistory history;
  common::Deadline::Clock::time_point off{};
  transport::Spinner spinner(100, 1000us, history, off);
  EXPECT_FALSE(spinner.again()) << "spun while compute threads wanted every core";
  share.noteEngine(-1);
  transport::Spinner alone(100, 1000us, history, off);
  EXPECT_TRUE(alone.again()) << "no engine, nobody else computing: the caller may spin";
  share.setComputeThreads(1);
}

}  // namespace
}  // namespace hora::testing
