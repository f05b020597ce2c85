// The knob registry as the one source of defaults (Note [one source for defaults] in
// src/common/knobs.h), and configuration parsing without side effects.
#include <gtest/gtest.h>

#include "common/config.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "engine/engine_options.h"
#include "expect_error.h"
#include "transport/shm/shm_transport.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;

const common::Env kUnset = common::Env::fromMap({});

// Field by field for a readable failure; then the defaulted operator==, which also covers a
// field added later.
TEST(KnobDefaults, CommunicatorOptionsInitializersAreTheRegistrys) {
  const CommunicatorOptions parsed = common::communicatorOptionsFrom(kUnset);
  const CommunicatorOptions initialized;
  EXPECT_EQ(parsed.timeout, initialized.timeout);
  EXPECT_EQ(parsed.iface, initialized.iface);
  EXPECT_EQ(parsed.ring_threshold_bytes, initialized.ring_threshold_bytes);
  EXPECT_EQ(parsed.shm_ring_threshold_bytes, initialized.shm_ring_threshold_bytes);
  EXPECT_EQ(parsed.chunk_bytes, initialized.chunk_bytes);
  EXPECT_EQ(parsed.shm_inbox_bytes, initialized.shm_inbox_bytes);
  EXPECT_EQ(parsed.spin, initialized.spin);
  EXPECT_EQ(parsed.shm_spin, initialized.shm_spin);
  EXPECT_EQ(parsed.transport, initialized.transport);
  EXPECT_EQ(parsed.hierarchical, initialized.hierarchical);
  EXPECT_EQ(parsed.hierarchical_allgather, initialized.hierarchical_allgather);
  EXPECT_EQ(parsed.hierarchical_broadcast, initialized.hierarchical_broadcast);
  EXPECT_TRUE(parsed == initialized) << "a field of CommunicatorOptions differs from its knob's default";
}

TEST(KnobDefaults, EngineOptionsInitializersAreTheRegistrys) {
  const EngineOptions parsed = engine::engineOptionsFrom(kUnset);
  const EngineOptions initialized;
  EXPECT_EQ(parsed.cycle_time, initialized.cycle_time);
  EXPECT_EQ(parsed.fusion_threshold, initialized.fusion_threshold);
  EXPECT_EQ(parsed.bucket_bytes, initialized.bucket_bytes);
  EXPECT_EQ(parsed.cache_capacity, initialized.cache_capacity);
  EXPECT_EQ(parsed.stall_check, initialized.stall_check);
  EXPECT_EQ(parsed.stall_shutdown, initialized.stall_shutdown);
  EXPECT_EQ(parsed.timeline, initialized.timeline);
  EXPECT_EQ(parsed.timeline_mark_cycles, initialized.timeline_mark_cycles);
  EXPECT_EQ(parsed.timeline_all_ranks, initialized.timeline_all_ranks);
  EXPECT_TRUE(parsed == initialized) << "a field of EngineOptions differs from its knob's default";
}

// The shared-memory transport is built from CommunicatorOptions; its own defaults are theirs.
TEST(KnobDefaults, ShmOptionsAreTheCommunicatorOptions) {
  const transport::shm::ShmOptions shm;
  const CommunicatorOptions parsed = common::communicatorOptionsFrom(kUnset);
  EXPECT_EQ(shm.chunk_bytes, parsed.chunk_bytes);
  EXPECT_EQ(shm.inbox_bytes, parsed.shm_inbox_bytes);
  EXPECT_EQ(shm.spin, parsed.shm_spin);
}

TEST(Config, EngineOptionsAreParsedAndBadValuesNamed) {
  const auto o = engine::engineOptionsFrom(
      common::Env::fromMap({{"HORA_CYCLE_TIME", "2.5"}, {"HOROVOD_FUSION_THRESHOLD", "4M"}}));
  EXPECT_EQ(o.cycle_time, 2500us);
  EXPECT_EQ(o.fusion_threshold, size_t{4} << 20);
  EXPECT_EQ(engine::engineOptionsFrom(common::Env::fromMap({{"HOROVOD_TIMELINE", "DYNAMIC"}})).timeline, "")
      << "Horovod's DYNAMIC means no timeline file until start_timeline()";
  EXPECT_EQ(engine::engineOptionsFrom(common::Env::fromMap({{"HORA_TIMELINE", "t.json"}})).timeline, "t.json");
  expectInvalid([] { engine::engineOptionsFrom(common::Env::fromMap({{"HORA_CACHE_CAPACITY", "-1"}})); },
                "HORA_CACHE_CAPACITY='-1'");
}

// Parsing a configuration leaves the process alone; applyLogLevel is the one that sets the level.
TEST(Config, ParsingLeavesTheLogLevelAloneAndApplyingSetsIt) {
  const auto before = common::logger().level();
  const auto env = common::Env::fromMap({{"HORA_LOG_LEVEL", "trace"}});
  common::setLogLevel(spdlog::level::err);
  common::communicatorOptionsFrom(env);
  EXPECT_EQ(common::logLevelFrom(env), spdlog::level::trace);
  EXPECT_EQ(common::logger().level(), spdlog::level::err);
  common::applyLogLevel(env);
  EXPECT_EQ(common::logger().level(), spdlog::level::trace);
  common::setLogLevel(before);
  expectInvalid([] { common::logLevelFrom(common::Env::fromMap({{"HORA_LOG_LEVEL", "loud"}})); },
                "HORA_LOG_LEVEL='loud'");
}

TEST(Knobs, FindKnobAcceptsTheNameOrTheHorovodAlias) {
  ASSERT_NE(common::findKnob("HORA_CYCLE_TIME"), nullptr);
  EXPECT_EQ(common::findKnob("HOROVOD_CYCLE_TIME"), common::findKnob("HORA_CYCLE_TIME"));
  EXPECT_EQ(common::findKnob("HORA_NO_SUCH_KNOB"), nullptr);
  EXPECT_EQ(common::findKnob(""), nullptr);  // knobs without an alias do not match the empty name
}

}  // namespace
}  // namespace hora::testing
