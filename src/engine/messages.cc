#include "engine/messages.h"

#include <cstring>

#include "hora/errors.h"

namespace hora::engine {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T get() {
    if (in_.size() - pos_ < sizeof(T)) throw InternalError("truncated negotiation message");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  bool done() const { return pos_ == in_.size(); }
  std::string string(size_t n) {
    if (in_.size() - pos_ < n) throw InternalError("truncated negotiation message");
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace

RequestMeta RequestMeta::of(const Request& r) {
  RequestMeta m;
  m.name = r.name;
  m.op = r.op;
  m.type = r.type;
  m.shape = r.shape;
  m.reduce_op = r.reduce.op;
  m.prescale = r.reduce.prescale;
  m.postscale = r.reduce.postscale;
  m.root = r.root;
  m.splits = r.splits;
  return m;
}

int64_t RequestMeta::rowElements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

void encode(const RequestMeta& m, std::vector<uint8_t>& out) {
  put<uint32_t>(out, static_cast<uint32_t>(m.name.size()));
  out.insert(out.end(), m.name.begin(), m.name.end());
  put<uint8_t>(out, static_cast<uint8_t>(m.op));
  put<int32_t>(out, static_cast<int32_t>(m.type));
  put<int32_t>(out, static_cast<int32_t>(m.reduce_op));
  put<double>(out, m.prescale);
  put<double>(out, m.postscale);
  put<int32_t>(out, m.root);
  put<uint32_t>(out, static_cast<uint32_t>(m.shape.size()));
  for (int64_t d : m.shape) put<int64_t>(out, d);
  put<uint32_t>(out, static_cast<uint32_t>(m.splits.size()));
  for (int64_t s : m.splits) put<int64_t>(out, s);
}

std::vector<RequestMeta> decodeAll(std::span<const uint8_t> bytes) {
  std::vector<RequestMeta> all;
  Reader in(bytes);
  while (!in.done()) {
    RequestMeta m;
    m.name = in.string(in.get<uint32_t>());
    const auto op = in.get<uint8_t>();
    if (op >= kNumCollectiveKinds)
      throw InternalError("negotiation: unknown collective " + std::to_string(op) + " for '" + m.name + "'");
    m.op = static_cast<CollectiveKind>(op);
    m.type = static_cast<DataType>(in.get<int32_t>());
    m.reduce_op = static_cast<ReduceOp>(in.get<int32_t>());
    m.prescale = in.get<double>();
    m.postscale = in.get<double>();
    m.root = in.get<int32_t>();
    const auto dims = in.get<uint32_t>();
    for (uint32_t i = 0; i < dims; ++i) m.shape.push_back(in.get<int64_t>());
    const auto splits = in.get<uint32_t>();
    for (uint32_t i = 0; i < splits; ++i) m.splits.push_back(in.get<int64_t>());
    all.push_back(std::move(m));
  }
  return all;
}

}  // namespace hora::engine
