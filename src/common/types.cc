#include <iterator>
#include <string>

#include "hora/errors.h"
#include "hora/types.h"

namespace hora {
namespace {
constexpr std::string_view kTypeNames[] = {"uint8",   "int8",    "int32", "int64", "float16",
                                           "bfloat16", "float32", "float64", "int16", "bool"};
constexpr size_t kTypeSizes[] = {1, 1, 4, 8, 2, 2, 4, 8, 2, 1};
static_assert(std::size(kTypeNames) == kNumDataTypes && std::size(kTypeSizes) == kNumDataTypes);
constexpr std::string_view kOpNames[] = {"sum", "average", "min", "max", "product", "adasum"};
constexpr std::string_view kCollectiveNames[] = {"allreduce",     "allgather", "broadcast", "alltoall",
                                                 "reducescatter", "join",      "barrier"};
static_assert(std::size(kCollectiveNames) == kNumCollectiveKinds);

int checkedIndex(DataType type) {
  const int i = static_cast<int>(type);
  if (i < 0 || i >= kNumDataTypes)
    throw InvalidArgumentError("unknown data type " + std::to_string(i));
  return i;
}
}  // namespace

size_t dataTypeSize(DataType type) { return kTypeSizes[checkedIndex(type)]; }

bool isFloatingPoint(DataType type) {
  switch (static_cast<DataType>(checkedIndex(type))) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64: return true;
    default: return false;
  }
}

std::string_view toString(DataType type) {
  const int i = static_cast<int>(type);
  return i >= 0 && i < kNumDataTypes ? kTypeNames[i] : "unknown";
}

std::string_view toString(ReduceOp op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumReduceOps ? kOpNames[i] : "unknown";
}

std::string_view toString(CollectiveKind kind) {
  const int i = static_cast<int>(kind);
  return i < kNumCollectiveKinds ? kCollectiveNames[i] : "unknown";
}

std::optional<DataType> parseDataType(std::string_view name) {
  for (int i = 0; i < kNumDataTypes; ++i)
    if (kTypeNames[i] == name) return static_cast<DataType>(i);
  if (name == "float" || name == "fp32") return DataType::kFloat32;
  if (name == "double" || name == "fp64") return DataType::kFloat64;
  if (name == "half" || name == "fp16") return DataType::kFloat16;
  if (name == "bf16") return DataType::kBFloat16;
  if (name == "int") return DataType::kInt32;
  if (name == "short") return DataType::kInt16;
  return std::nullopt;
}

std::optional<ReduceOp> parseReduceOp(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (kOpNames[i] == name) return static_cast<ReduceOp>(i);
  if (name == "avg") return ReduceOp::kAverage;
  if (name == "prod") return ReduceOp::kProduct;
  return std::nullopt;
}

std::optional<CollectiveKind> parseCollectiveKind(std::string_view name) {
  for (int i = 0; i < kNumCollectiveKinds; ++i)
    if (kCollectiveNames[i] == name) return static_cast<CollectiveKind>(i);
  return std::nullopt;
}

void rethrowAs(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::kInvalidArgument: throw InvalidArgumentError(e.what());
    case ErrorKind::kTimeout: throw TimeoutError(e.what());
    case ErrorKind::kPeer: throw PeerError(e.what());
    case ErrorKind::kMismatch: throw MismatchError(e.what());
    case ErrorKind::kAuthentication: throw AuthenticationError(e.what());
    case ErrorKind::kShutdown: throw ShutdownError(e.what());
    case ErrorKind::kRemoved: throw WorkerRemovedError(e.what());
    case ErrorKind::kInternal: break;
  }
  throw InternalError(e.what());
}

}  // namespace hora
