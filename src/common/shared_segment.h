// POSIX shared-memory segments: the inboxes of ShmTransport (Note [shm rings]) and the engine's
// submission board (Note [submission board]).
//
// Segments are mapped with MAP_POPULATE, by their owner and by every peer: a ring's pages would
// otherwise fault in one by one the first time messages pass through them (measured: 16 KiB
// allreduces at 2 ranks took 20 us each for the first 64 calls, 2.5 us afterwards). The owner
// unlinks the name once every peer has mapped it, so nothing outlives the job.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace hora::common {

// Creates, sizes and maps a new segment with a name no other segment has; returns the name.
std::pair<std::string, void*> createSegment(size_t bytes);
// Maps rank `peer`'s segment, which must be `bytes` long; PeerError naming the peer otherwise.
void* mapSegment(const std::string& name, size_t bytes, int peer);

}  // namespace hora::common
