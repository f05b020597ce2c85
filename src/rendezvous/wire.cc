#include "rendezvous/wire.h"

#include <cstring>
#include <optional>

namespace hora::rendezvous::wire {
namespace {

constexpr uint8_t kDirectionRequest = 'Q';
constexpr uint8_t kDirectionResponse = 'P';

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void bytes(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t>& out() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Bounds-checked reader: every accessor returns nullopt instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  std::optional<T> scalar() {
    if (in_.size() - pos_ < sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::optional<std::string> bytes() {
    auto n = scalar<uint32_t>();
    if (!n || in_.size() - pos_ < *n) return std::nullopt;
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), *n);
    pos_ += *n;
    return s;
  }
  bool atEnd() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

common::Mac frameMac(std::string_view secret, const common::Nonce& challenge, uint8_t direction,
                     uint64_t seq, std::span<const uint8_t> header_and_body) {
  return common::hmacSha256(
      secret, {challenge, std::span<const uint8_t>(&direction, 1),
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&seq), 8),
               header_and_body});
}

std::vector<uint8_t> frame(uint32_t magic, Writer body, std::string_view secret,
                           const common::Nonce& challenge, uint8_t direction, uint64_t seq) {
  Writer w;
  w.u32(magic);
  w.u32(static_cast<uint32_t>(body.out().size()));
  w.raw(body.out().data(), body.out().size());
  const common::Mac mac = frameMac(secret, challenge, direction, seq, w.out());
  w.raw(mac.data(), mac.size());
  return std::move(w.out());
}

// Splits off one authenticated frame body, or says why not.
std::variant<NeedMore, Refused, std::pair<std::span<const uint8_t>, size_t>> unframe(
    std::span<const uint8_t> buffer, uint32_t magic, std::string_view secret,
    const common::Nonce& challenge, uint8_t direction, uint64_t seq) {
  if (buffer.size() >= 4) {
    uint32_t m;
    std::memcpy(&m, buffer.data(), 4);
    if (m != magic) return Refused{"bad magic (not a hora store frame)"};
  }
  if (buffer.size() < kFrameHeaderBytes) return NeedMore{};
  uint32_t len;
  std::memcpy(&len, buffer.data() + 4, 4);
  if (len > kMaxBodyBytes)
    return Refused{"oversized frame of " + std::to_string(len) + " bytes (limit " +
                   std::to_string(kMaxBodyBytes) + ")"};
  const size_t total = kFrameHeaderBytes + len + common::kMacBytes;
  if (buffer.size() < total) return NeedMore{};
  const auto signed_part = buffer.subspan(0, kFrameHeaderBytes + len);
  const common::Mac mac = frameMac(secret, challenge, direction, seq, signed_part);
  if (!common::macEqual(mac, buffer.data() + kFrameHeaderBytes + len))
    return Refused{"authentication failed (wrong job secret, or a replayed frame)"};
  return std::make_pair(buffer.subspan(kFrameHeaderBytes, len), total);
}

}  // namespace

std::vector<uint8_t> encodeRequest(const Request& r, std::string_view secret,
                                   const common::Nonce& challenge, uint64_t seq) {
  Writer body;
  body.u8(static_cast<uint8_t>(r.op));
  body.i64(r.arg);
  body.u32(static_cast<uint32_t>(r.keys.size()));
  for (const auto& k : r.keys) body.bytes(k);
  body.bytes(r.value);
  return frame(kRequestMagic, std::move(body), secret, challenge, kDirectionRequest, seq);
}

std::vector<uint8_t> encodeResponse(const Response& r, std::string_view secret,
                                    const common::Nonce& challenge, uint64_t seq) {
  Writer body;
  body.u8(static_cast<uint8_t>(r.status));
  body.i64(r.number);
  body.bytes(r.value);
  return frame(kResponseMagic, std::move(body), secret, challenge, kDirectionResponse, seq);
}

std::variant<NeedMore, Refused, Decoded<Request>> decodeRequest(std::span<const uint8_t> buffer,
                                                                std::string_view secret,
                                                                const common::Nonce& challenge,
                                                                uint64_t seq) {
  auto u = unframe(buffer, kRequestMagic, secret, challenge, kDirectionRequest, seq);
  if (auto* n = std::get_if<NeedMore>(&u)) return *n;
  if (auto* r = std::get_if<Refused>(&u)) return *r;
  auto [body, consumed] = std::get<2>(u);
  Reader in(body);
  Request req;
  auto op = in.scalar<uint8_t>();
  auto arg = in.scalar<int64_t>();
  auto nkeys = in.scalar<uint32_t>();
  if (!op || !arg || !nkeys) return Refused{"truncated request header"};
  if (*op < static_cast<uint8_t>(Op::kSet) || *op > static_cast<uint8_t>(Op::kWait))
    return Refused{"unknown operation " + std::to_string(*op)};
  if (*nkeys > kMaxKeys) return Refused{"too many keys: " + std::to_string(*nkeys)};
  req.op = static_cast<Op>(*op);
  req.arg = *arg;
  for (uint32_t i = 0; i < *nkeys; ++i) {
    auto key = in.bytes();
    if (!key) return Refused{"truncated key"};
    req.keys.push_back(std::move(*key));
  }
  auto value = in.bytes();
  if (!value || !in.atEnd()) return Refused{"malformed value"};
  req.value = std::move(*value);
  const size_t want_keys = req.op == Op::kWait ? req.keys.size() : 1;
  if (req.keys.size() != want_keys || (req.op == Op::kWait && req.keys.empty()))
    return Refused{"wrong number of keys for the operation"};
  return Decoded<Request>{std::move(req), consumed};
}

std::variant<NeedMore, Refused, Decoded<Response>> decodeResponse(
    std::span<const uint8_t> buffer, std::string_view secret, const common::Nonce& challenge,
    uint64_t seq) {
  auto u = unframe(buffer, kResponseMagic, secret, challenge, kDirectionResponse, seq);
  if (auto* n = std::get_if<NeedMore>(&u)) return *n;
  if (auto* r = std::get_if<Refused>(&u)) return *r;
  auto [body, consumed] = std::get<2>(u);
  Reader in(body);
  Response resp;
  auto status = in.scalar<uint8_t>();
  auto number = in.scalar<int64_t>();
  auto value = in.bytes();
  if (!status || !number || !value || !in.atEnd() || *status > static_cast<uint8_t>(Status::kError))
    return Refused{"malformed response"};
  resp.status = static_cast<Status>(*status);
  resp.number = *number;
  resp.value = std::move(*value);
  return Decoded<Response>{std::move(resp), consumed};
}

}  // namespace hora::rendezvous::wire
