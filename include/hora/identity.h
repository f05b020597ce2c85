// Identity: where this process stands in the job.
//
// rank/size: position among all ranks. local_rank/local_size: among the ranks of this host.
// cross_rank/cross_size: among the ranks that have the same local_rank on other hosts (so
// cross_size is the number of hosts when every host runs the same number of ranks). Hosts are
// told apart by hostname (HORA_HOSTNAME, set by the launcher).
#pragma once

#include <string>
#include <vector>

#include "hora/export.h"

namespace hora {

struct HORA_API Identity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string hostname;
  // In an elastic job, the generation this identity belongs to (docs/elastic.md); 0 otherwise.
  int generation = 0;

  // local_rank, local_size, cross_rank and cross_size all equal to kDerive: the Communicator
  // fills them in from the hostnames of all ranks (exchanged through the rendezvous store).
  static constexpr int kDerive = -1;

  // Reads HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_CROSS_RANK,
  // HORA_CROSS_SIZE and HORA_HOSTNAME. With none set: a single process (size 1). With only rank
  // and size: the local and cross fields are kDerive. Throws InvalidArgumentError naming the
  // variable when one is malformed or out of range.
  static Identity fromEnvironment();

  bool derivesTopology() const;
  // Sets the local and cross fields from every rank's hostname (indexed by rank).
  void deriveTopology(const std::vector<std::string>& hostnames);

  // Throws InvalidArgumentError when the fields contradict each other.
  void validate() const;
};

}  // namespace hora
