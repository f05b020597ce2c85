// Hierarchy: the two sub-communicators of a hierarchical allreduce, for ranks that span hosts.
//
// local: the ranks of this host (shared memory). cross: the ranks that hold the same position
// among their host's ranks, one per host (TCP). An allreduce across hosts is then a reduce-scatter
// inside each host, an allreduce of each slice among the hosts, and an allgather inside each
// host: the slow links between hosts carry each byte of the result once per host pair direction
// instead of once per rank (docs/algorithms.md, "Hierarchical allreduce").
#pragma once

#include <memory>

#include "hora/communicator.h"

namespace hora::collectives {

class Hierarchy {
 public:
  // Called by every rank of `world` at the same point (it runs an allgather of host ids and
  // connects the sub-communicators), so every rank decides alike. Returns null when the hosts
  // hold different numbers of ranks (uneven hosts keep the flat algorithms) or when there is one
  // host or one rank per host.
  static std::unique_ptr<Hierarchy> build(Communicator& world);

  // out = op over every rank of `in` (in may equal out); prescale is the caller's, postscale and
  // Average's division happen here.
  void allreduce(const void* in, void* out, size_t count, DataType type, const AllreduceOptions& o, int world_size);

 private:
  Hierarchy(std::unique_ptr<Communicator> local, std::unique_ptr<Communicator> cross)
      : local_(std::move(local)), cross_(std::move(cross)) {}
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;
};

}  // namespace hora::collectives
