// FailureReport: tells every rank of a failed collective what the others saw.
//
// Note [failure reports]: a rank sees only its own sockets. When rank 2 is SIGSTOPped, its ring
// neighbour times out waiting for rank 2, but the rank after that times out waiting for the
// neighbour, which is innocent. So a rank that fails publishes its error in the store (the
// control plane, separate from the data plane) and gathers the others' reports for a short
// grace period. Ranks that stay silent although alive ranks all report are the stopped or hung
// ones, and the final message names them. Best effort: a dead store only shortens the message.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "rendezvous/store.h"

namespace hora::collectives {

struct FailureReportOptions {
  int rank = 0;
  int size = 1;
  std::string key_prefix;
  std::chrono::milliseconds grace{500};
  std::function<std::string(int)> describe_peer;  // "rank 3 (10.0.0.2:4000)"
  std::function<int(int)> label = [](int r) { return r; };  // a rank's number in messages
};

// Publishes `error` and returns it extended with what the other ranks reported.
std::string reportFailure(rendezvous::Store& store, const FailureReportOptions& options,
                          const std::string& error, bool list_silent_ranks);

}  // namespace hora::collectives
