// Elastic jobs (horarun --min-np / --max-np / --host-discovery-script; docs/elastic.md): what a
// worker asks of the driver besides its place in each generation.
//
// A worker's rank and size hold for one generation. Communicator::fromEnvironment() joins the
// next generation each time it is called, so the elastic loop of a C++ program is: on a
// PeerError / TimeoutError / ShutdownError from a collective (a worker was lost), or when
// hostUpdates() changed (a host was added or removed), destroy the Engine and Communicator, make
// new ones with Communicator::fromEnvironment(), and broadcast the last committed state from
// rank 0. fromEnvironment() throws WorkerRemovedError when the driver has no place for this
// worker any more: the process should then exit with code 0.
#pragma once

#include <cstdint>
#include <string>

#include "hora/export.h"

namespace hora::elastic {

// Whether this process is a worker of an elastic job (HORA_ELASTIC=1, set by horarun).
HORA_API bool enabled();

struct HostUpdates {
  int64_t counter = 0;  // how many times the usable hosts changed; 0: never
  std::string kind;     // of the last change: "added", "removed" or "mixed"; "" when none
};

// What the driver has published about host changes; {0, ""} outside an elastic job. Asks the
// rendezvous store (one request), so call it at commits, not every step.
HORA_API HostUpdates hostUpdates();

}  // namespace hora::elastic
