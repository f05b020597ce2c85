// The TCP transport's framing: every Transfer travels as a 16-byte FrameHeader and its payload.
//
// The header lets the receiver check, before it trusts a single payload byte, that the sender is
// a hora rank (magic), in the same collective (sequence, op) and agrees on the length. A
// kGoodbye frame is the last thing a rank sends when it shuts down cleanly, which tells a
// finished peer apart from a dead one (Note [peer liveness] in tcp_transport.cc).
#pragma once

#include <cstdint>

namespace hora::transport::tcp {

inline constexpr uint16_t kFrameMagic = 0x4448;  // "HD"

enum class FrameKind : uint8_t { kData = 0, kGoodbye = 1 };

struct FrameHeader {
  uint16_t magic = kFrameMagic;
  uint8_t op = 0;
  FrameKind kind = FrameKind::kData;
  uint32_t sequence = 0;
  uint64_t bytes = 0;
};
static_assert(sizeof(FrameHeader) == 16);

}  // namespace hora::transport::tcp
