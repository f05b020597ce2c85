#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <vector>

#include "hora/errors.h"

namespace hora::common {

Mac hmacSha256(std::string_view key, std::initializer_list<std::span<const uint8_t>> parts) {
  size_t total = 0;
  for (auto p : parts) total += p.size();
  std::vector<uint8_t> message;
  message.reserve(total);
  for (auto p : parts) message.insert(message.end(), p.begin(), p.end());
  Mac mac{};
  unsigned int len = 0;
  if (::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(),
             message.size(), mac.data(), &len) == nullptr ||
      len != kMacBytes) {
    throw InternalError("HMAC-SHA256 failed");
  }
  return mac;
}

bool macEqual(const Mac& a, const uint8_t* b) { return CRYPTO_memcmp(a.data(), b, kMacBytes) == 0; }

Nonce randomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) throw InternalError("RAND_bytes failed");
  return n;
}

std::string randomSecret() {
  uint8_t bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) throw InternalError("RAND_bytes failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace hora::common
