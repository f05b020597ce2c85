// libFuzzer target for the store's request parsing: whatever bytes arrive, decodeRequest must
// answer NeedMore, Refused or a Request without reading out of bounds or crashing. Half of the
// inputs get a valid authentication tag (computed here) so that the fuzzer also reaches the
// body decoder behind the HMAC check.
#include <cstdint>
#include <cstring>
#include <vector>

#include "rendezvous/wire.h"

namespace wire = hora::rendezvous::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kSecret = "fuzz-secret";
  const hora::common::Nonce challenge{};
  (void)wire::decodeRequest({data, size}, kSecret, challenge, 0);
  if (size >= 1 && (data[0] & 1)) {
    // Frame the input as a body with a correct tag.
    wire::Request dummy;
    std::vector<uint8_t> frame;
    const uint32_t magic = wire::kRequestMagic, len = static_cast<uint32_t>(size - 1);
    frame.resize(8);
    std::memcpy(frame.data(), &magic, 4);
    std::memcpy(frame.data() + 4, &len, 4);
    frame.insert(frame.end(), data + 1, data + size);
    const uint8_t direction = 'Q';
    const uint64_t seq = 0;
    const auto mac = hora::common::hmacSha256(
        kSecret, {challenge, std::span<const uint8_t>(&direction, 1),
                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&seq), 8), frame});
    frame.insert(frame.end(), mac.begin(), mac.end());
    (void)wire::decodeRequest(frame, kSecret, challenge, 0);
  }
  return 0;
}
