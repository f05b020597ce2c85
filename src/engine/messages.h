// RequestMeta: what one rank tells the others about a request it submitted (everything but the
// buffers), and its byte encoding for the negotiation's allgather.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hora/engine.h"

namespace hora::engine {

struct RequestMeta {
  std::string name;
  CollectiveKind op = CollectiveKind::kAllreduce;
  DataType type = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int32_t root = 0;
  std::vector<int64_t> splits;

  static RequestMeta of(const Request& r);
  bool operator==(const RequestMeta&) const = default;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  // Elements per row of dimension 0 (the product of the other dimensions).
  int64_t rowElements() const;
  int64_t elements() const { return shape.empty() ? 1 : rows() * rowElements(); }
};

void encode(const RequestMeta& m, std::vector<uint8_t>& out);
// Decodes every meta in `bytes`; throws InternalError on malformed input.
std::vector<RequestMeta> decodeAll(std::span<const uint8_t> bytes);

}  // namespace hora::engine
