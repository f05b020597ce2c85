// Transport: moves bytes between the ranks of a communicator. The collectives are written
// against this interface only, so another transport (shared memory, a mix per pair) slots in.
//
// Note [transfer sets]: a collective hands the transport a set of Transfers and waits for all of
// them (run). Transfers with the same peer and direction run in the order given; everything
// else runs concurrently. Two hooks make a set a pipeline rather than a list:
//   - a send may be gated by `ready`: only the first *ready bytes may leave yet. Pointing it at
//     an earlier receive's `done` forwards data chunk by chunk as it arrives (chain broadcast,
//     ring allgather), and pointing it at a counter advanced by a reduction forwards partial sums
//     as soon as they are reduced (ring reduce-scatter).
//   - a receive with no destination (`data == nullptr`) lands in the transport's scratch space,
//     and `on_chunk` consumes it (typically: reduce it into an accumulator) one chunk at a time,
//     while the next chunk is still on the wire.
// A chunk is at most Options::chunk_bytes long; chunks split only at multiples of 16 bytes, so
// they hold whole elements of every data type.
//
// Errors: run() throws PeerError naming the peer rank and address when a peer closes, resets or
// sends something that is not a hora frame, MismatchError when a peer's frame belongs to another
// collective or has another length, and TimeoutError naming the peers still owed bytes when the
// deadline passes. The first such error breaks the transport: later calls rethrow it.
//
// Thread safety: run() is called by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/deadline.h"
#include "hora/types.h"

namespace hora::transport {

struct Transfer {
  enum class Kind : uint8_t { kSend, kRecv };
  using ChunkFn = std::function<void(size_t offset, const std::byte* chunk, size_t length)>;

  Kind kind = Kind::kSend;
  int peer = -1;
  std::byte* data = nullptr;  // send: source. recv: destination, or null for on_chunk delivery.
  size_t bytes = 0;
  const size_t* ready = nullptr;  // send only: bytes of `data` that may be sent so far
  ChunkFn on_chunk;               // recv into scratch only
  size_t done = 0;  // bytes completed; a recv advances it after on_chunk returns

  static Transfer send(int peer, const void* data, size_t bytes, const size_t* ready = nullptr) {
    return {Kind::kSend, peer, static_cast<std::byte*>(const_cast<void*>(data)), bytes, ready, {}, 0};
  }
  static Transfer recv(int peer, void* data, size_t bytes) {
    return {Kind::kRecv, peer, static_cast<std::byte*>(data), bytes, nullptr, {}, 0};
  }
  static Transfer recvChunks(int peer, size_t bytes, ChunkFn fn) {
    return {Kind::kRecv, peer, nullptr, bytes, nullptr, std::move(fn), 0};
  }
};

// Identifies the collective a set of transfers belongs to; travels in every frame so that ranks
// that disagree about the order of collectives are caught.
struct OpTag {
  uint32_t sequence = 0;  // per communicator, increments with every collective
  uint8_t op = 0;         // a CollectiveKind
  std::string_view name;  // for messages: "allreduce"
};

// The collective a frame's op byte names: "allreduce", or "op 9" for a byte that names none.
inline std::string collectiveNamed(uint32_t op) {
  if (op < static_cast<uint32_t>(kNumCollectiveKinds)) return std::string(toString(static_cast<CollectiveKind>(op)));
  return "op " + std::to_string(op);
}

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual size_t chunkBytes() const = 0;
  // "rank 3 (10.0.0.2:41234)": how messages name a peer.
  virtual std::string describePeer(int rank) const = 0;

  // Runs every transfer to completion (Note [transfer sets]).
  virtual void run(std::span<Transfer> transfers, const OpTag& tag,
                   const common::Deadline& deadline) = 0;

  // Blocks, without spinning, until a peer has sent bytes this rank has not read (the first
  // message of a collective another rank entered; a lost peer counts too), `wake_fd` (if >= 0)
  // is readable, or `timeout` passes. Reads nothing. Returns false on timeout.
  virtual bool waitForIncoming(std::chrono::milliseconds timeout, int wake_fd) = 0;

  // Whether `peer` said goodbye (closed its end cleanly), as far as this rank's waits have seen:
  // waitForIncoming does not wake for a goodbye, so a rank that waits for one peer alone asks.
  virtual bool departed(int peer) const = 0;
};

}  // namespace hora::transport
