// Plan: which algorithm runs a collective, decided in one place.
//
// The Communicator dispatches on the plan, and logs and timelines print describe(plan): what is
// reported is what ran. Every input is the same on every rank (the counts of a collective, the
// options, the group's shape read from the store), so every rank plans alike, which the
// algorithms need: they are not negotiated. This is also where a later autotuner or a
// steady-state schedule would decide.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "collectives/algorithms.h"
#include "hora/options.h"
#include "hora/types.h"

namespace hora::collectives {

// What the planner needs to know of the group a collective runs on.
struct GroupShape {
  int size = 1;
  bool shared_memory = false;   // every peer over shared memory
  bool even_hosts = false;      // Topology::evenHosts
  bool placed_by_host = true;   // Topology::placedByHost
};

struct Plan {
  Algorithm algorithm = Algorithm::kLocal;
};

// `count` elements of `bytes` in all (SIZE_MAX when unknown: only tensors with fewer elements
// than ranks plan differently).
Plan plan(CollectiveKind op, size_t count, size_t bytes, ReduceOp reduce, const GroupShape& group,
          const CommunicatorOptions& options);

// "ring over tcp", "binomial tree over shared memory", "hierarchical (...)", "local".
std::string describe(CollectiveKind op, const Plan& plan, std::string_view transport_name);

}  // namespace hora::collectives
