// Hierarchy: the two inner groups of the hierarchical collectives, for ranks that span hosts.
//
// local: the ranks of this host (shared memory). cross: the ranks that hold the same position
// among their host's ranks, one per host (TCP). Each step is a flat algorithm on one of them,
// planned for that group; a failure in a step is the Communicator's to report, once, for the
// whole collective. Then (docs/algorithms.md, "Hierarchical
// collectives"):
//   allreduce = reduce-scatter inside each host, allreduce of each slice among the hosts,
//               allgather inside each host: the links between hosts carry each byte of the result
//               once per host instead of once per rank;
//   allgather = allgather among the hosts (each rank's block to its counterparts), then inside
//               each host: each block crosses to every other host once, whatever the placement;
//   broadcast = broadcast among the root's counterparts on the other hosts, then inside each
//               host: each byte crosses to every other host once whatever the placement (a
//               flat chain does too when ranks are placed host by host, and pipelines both).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bootstrap/connect.h"
#include "collectives/group.h"

namespace hora::collectives {

class Hierarchy {
 public:
  // Called by every rank of `world` at the same point (it connects the inner groups), when its
  // topology has even hosts.
  static std::unique_ptr<Hierarchy> build(const bootstrap::Connection& world, const CommunicatorOptions& options);

  // out = op over every rank of `in` (in may equal out); prescale is the caller's, postscale and
  // Average's division happen here.
  void allreduce(const void* in, void* out, size_t count, DataType type, const AllreduceOptions& o, int world_size);
  // Communicator::allgather's contract, with `counts` indexed by world rank.
  void allgather(const void* in, void* out, std::span<const size_t> counts, DataType type);
  // Communicator::broadcast's contract; `root` is a world rank.
  void broadcast(void* buffer, size_t count, DataType type, int root);

 private:
  Hierarchy(Group local, Group cross, std::vector<std::vector<int>> counterparts, std::vector<int> position)
      : local_(std::move(local)), cross_(std::move(cross)), counterparts_(std::move(counterparts)),
        position_(std::move(position)) {}
  Group local_;
  Group cross_;
  // For each position p on a host: the world ranks at position p on every host, ascending (the
  // members of the cross communicator of position p, in its rank order).
  std::vector<std::vector<int>> counterparts_;
  std::vector<int> position_;  // by world rank: its position among its host's ranks
  std::vector<std::byte> across_, within_;  // allgather's staging, kept between calls
};

}  // namespace hora::collectives
