// The layout of a shared-memory inbox (Note [shm rings] in shm_transport.cc): a header, one
// Channel (the two positions of a ring) per member, then one ring per member. Every member maps
// every other member's inbox, so the layout is checked (magic, size, ring_bytes) before use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hora::transport::shm {

constexpr uint32_t kInboxMagic = 0x484f5348;    // "HOSH"
constexpr uint32_t kMessageMagic = 0x484f534d;  // "HOSM"
constexpr size_t kHeaderBytes = 16;

inline size_t roundUp16(size_t n) { return (n + 15) & ~size_t{15}; }

// Precedes every message in a ring, as a frame header does on TCP.
struct MessageHeader {
  uint32_t magic;
  uint32_t sequence;
  uint32_t op;
  uint32_t bytes_low;  // payload length; collectives larger than 4 GiB are split by the caller
};
static_assert(sizeof(MessageHeader) == kHeaderBytes);

struct Channel {
  alignas(64) std::atomic<uint64_t> written;
  alignas(64) std::atomic<uint64_t> consumed;
};

struct Inbox {
  struct alignas(64) Header {
    uint32_t magic;
    uint32_t size;  // members
    uint64_t ring_bytes;
    std::atomic<uint32_t> doorbell;  // futex word
    std::atomic<uint32_t> sleeping;  // kOnFutex or kInPoll while the owner sleeps
    std::atomic<uint32_t> idle;      // 1 while the owner's engine sleeps in waitForIncoming
  };
  Header header;
  // Followed by Channel[size] and then size rings of ring_bytes each.

  static size_t bytesFor(int size, size_t ring_bytes) {
    return sizeof(Inbox) + sizeof(Channel) * static_cast<size_t>(size) + ring_bytes * static_cast<size_t>(size);
  }
  Channel& channel(int from) { return reinterpret_cast<Channel*>(this + 1)[from]; }
  std::byte* ringOf(int from) {
    auto* rings = reinterpret_cast<std::byte*>(reinterpret_cast<Channel*>(this + 1) + header.size);
    return rings + header.ring_bytes * static_cast<size_t>(from);
  }
};

}  // namespace hora::transport::shm
