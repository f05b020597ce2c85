// The store's wire protocol: framing, authentication and request/response bodies.
//
// Note [store protocol]: on accept the server sends a Hello (magic "HRS1" + 16-byte random
// challenge). Every message after that is a frame
//     magic (4) | body length (u32 LE) | body | HMAC-SHA256 tag (32)
// whose tag covers (challenge, direction byte, u64 sequence number, magic, length, body). The
// sequence number counts the requests of this connection from 0, so a frame cannot be replayed
// on another connection (fresh challenge) or reordered within one. A frame longer than
// kMaxBodyBytes, with a bad magic, a bad tag or an undecodable body is refused and logged, and
// the connection is closed; the server keeps serving everyone else.
//
// Request body: op (u8) | integer argument (i64: timeout ms or delta) | key count (u32) |
//               keys (u32 length + bytes each) | value (u32 length + bytes).
// Response body: status (u8) | integer (i64) | value or error text (u32 length + bytes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/crypto.h"

namespace hora::rendezvous::wire {

inline constexpr uint32_t kHelloMagic = 0x31535248;     // "HRS1"
inline constexpr uint32_t kRequestMagic = 0x31515248;   // "HRQ1"
inline constexpr uint32_t kResponseMagic = 0x31505248;  // "HRP1"
inline constexpr size_t kFrameHeaderBytes = 8;
inline constexpr size_t kHelloBytes = 4 + common::kNonceBytes;
inline constexpr uint32_t kMaxBodyBytes = 16u << 20;
inline constexpr uint32_t kMaxKeys = 4096;

enum class Op : uint8_t { kSet = 1, kGet = 2, kTryGet = 3, kAdd = 4, kWait = 5 };
enum class Status : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kError = 3 };

struct Request {
  Op op = Op::kSet;
  int64_t arg = 0;  // timeout in ms for kGet/kWait, delta for kAdd
  std::vector<std::string> keys;
  std::string value;
};

struct Response {
  Status status = Status::kOk;
  int64_t number = 0;
  std::string value;  // the value, or the error text for kError
};

// Serialized frames, tagged with the connection's challenge and sequence number.
std::vector<uint8_t> encodeRequest(const Request& r, std::string_view secret,
                                   const common::Nonce& challenge, uint64_t seq);
std::vector<uint8_t> encodeResponse(const Response& r, std::string_view secret,
                                    const common::Nonce& challenge, uint64_t seq);

// Result of looking at the front of a receive buffer.
struct NeedMore {};
struct Refused {
  std::string reason;  // for the log line; the connection is closed
};
template <typename T>
struct Decoded {
  T message;
  size_t consumed;  // bytes of the buffer this frame used
};

std::variant<NeedMore, Refused, Decoded<Request>> decodeRequest(std::span<const uint8_t> buffer,
                                                                std::string_view secret,
                                                                const common::Nonce& challenge,
                                                                uint64_t seq);
std::variant<NeedMore, Refused, Decoded<Response>> decodeResponse(
    std::span<const uint8_t> buffer, std::string_view secret, const common::Nonce& challenge,
    uint64_t seq);

}  // namespace hora::rendezvous::wire
