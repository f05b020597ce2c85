// Group: a connected set of ranks that runs the flat algorithms: a communicator's world, or one
// level of its hierarchy (hierarchy.h).
//
// It plans each collective for its own shape (plan.h), numbers its collectives (the tag every
// frame carries, so that ranks that disagree on the order are caught) and keeps the scratch
// space the algorithms reuse. Failures are the owner's to report: a Group only throws.
// Single-threaded, like the Communicator that owns it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bootstrap/connect.h"
#include "collectives/algorithms.h"
#include "collectives/plan.h"

namespace hora::collectives {

class Group {
 public:
  Group(bootstrap::Connection connection, const CommunicatorOptions& options);

  int rank() const { return connection_.rank(); }
  int size() const { return connection_.size(); }
  const bootstrap::Connection& connection() const { return connection_; }

  Plan plan(CollectiveKind op, size_t count, size_t bytes, ReduceOp reduce = ReduceOp::kSum) const;
  std::string describe(CollectiveKind op, const Plan& plan) const;
  // The context of this group's next collective: its sequence number, a deadline one timeout away.
  Context next(CollectiveKind op, std::string_view name);
  uint32_t sequence() const { return sequence_; }
  const GroupShape& shape() const { return shape_; }
  const CommunicatorOptions& options() const { return options_; }
  // The options later collectives plan with (autotuning changes the plan's thresholds between
  // collectives, alike on every rank).
  void setOptions(const CommunicatorOptions& options) { options_ = options; }

 private:
  bootstrap::Connection connection_;
  CommunicatorOptions options_;
  GroupShape shape_;
  uint32_t sequence_ = 0;
  std::vector<std::byte> scratch_;
};

}  // namespace hora::collectives
