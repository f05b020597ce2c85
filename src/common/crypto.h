// The job secret's cryptography, all from OpenSSL's libcrypto: HMAC-SHA256 tags, random nonces
// and constant-time comparison. Nothing here is hand-written crypto.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hora::common {

inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kNonceBytes = 16;
using Mac = std::array<uint8_t, kMacBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;

// HMAC-SHA256 over the concatenation of `parts`.
Mac hmacSha256(std::string_view key, std::initializer_list<std::span<const uint8_t>> parts);
bool macEqual(const Mac& a, const uint8_t* b);  // constant time
Nonce randomNonce();
// 32 random bytes as 64 hex digits: a fresh job secret.
std::string randomSecret();

}  // namespace hora::common
