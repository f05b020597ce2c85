// Departures: why a rank's engine stopped, told to every rank of its process set.
//
// Note [departures]: a rank leaves the job by stopping its engine: its program called shutdown,
// its process is exiting (the frontend says whether its script raised), or its Engine was
// destroyed. It announces that through the control vector's running byte (control_vector.h),
// and in the cycle where the ranks agree that someone stops, they also allgather each rank's
// reason (empty for the ranks that stay). So every pending and later request, on every rank,
// fails with one ShutdownError that names the ranks that left and why ("hora has shut down:
// rank 1 is exiting: its function raised ValueError: bad shard 3"), instead of a bare "the
// engine has shut down" that leaves the reader to guess which rank is the root cause. A rank
// that dies without stopping its engine is named by the transport instead (PeerError: "rank 1
// closed its connection"; Note [peer liveness]).
#pragma once

#include <string>

#include "hora/communicator.h"

namespace hora::engine {

// Called by every rank in the cycle that agreed someone stops; `mine` is this rank's reason, or
// empty when it stays. Returns the ShutdownError text, the same on every rank.
std::string agreeOnDepartures(Communicator& comm, const std::string& mine);

}  // namespace hora::engine
