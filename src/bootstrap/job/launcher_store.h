// The rendezvous of a job that mpirun started across hosts, learned through the MPI launcher's
// key-value service (launcher_kvs.h) rather than set by hand: rank 0 serves the store on a free
// port with a fresh random secret and publishes "port:secret:address,address,..." (its IPv4
// addresses, the most likely reachable first: HORA_IFACE's, else the one on its default route);
// after the fence every other rank reads it and takes an address of rank 0 that it can reach.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hora/options.h"
#include "rendezvous/tcp_store_server.h"

namespace hora::bootstrap {

struct LearnedRendezvous {
  RendezvousOptions rendezvous;  // address, port and secret filled in, launcher_kvs cleared
  std::unique_ptr<rendezvous::TcpStoreServer> server;  // rank 0's, serving the job
};

// `job` from Note [foreign launch] with launcher_kvs set. Once per process
// (ProcessState::throughLauncher keeps the answer): every rank calls it at its first
// Communicator, as the fence needs. Throws InvalidArgumentError saying what to set by hand when
// the service cannot be used, TimeoutError when the ranks do not all arrive within `timeout`,
// PeerError when rank 0 cannot be reached.
LearnedRendezvous rendezvousThroughLauncher(const RendezvousOptions& job, int rank, const std::string& iface,
                                            std::chrono::milliseconds timeout);

// Orders rank 0's addresses for a rank whose own interfaces are `mine` (address/prefix length):
// those on a subnet of mine first, the rest in rank 0's order. For tests.
std::vector<std::string> orderByNearness(const std::vector<std::string>& theirs,
                                         const std::vector<std::pair<std::string, int>>& mine);

}  // namespace hora::bootstrap
