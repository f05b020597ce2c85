// Element types, reduction operators and collective kinds shared by every layer of hora.
//
// Values are stable: the C ABI (hora/c_api.h) and the wire headers use the same numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "hora/export.h"

namespace hora {

enum class DataType : int32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,   // IEEE binary16; reduced in float32
  kBFloat16 = 5,  // bfloat16; reduced in float32
  kFloat32 = 6,
  kFloat64 = 7,
  kInt16 = 8,
  kBool = 9,  // one byte, 0 or 1 (any non-zero byte reads as true). Sum and Max are logical or,
              // Product and Min logical and; Average and scale factors are refused
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,  // Sum times 1/(number of ranks): a postscale factor (see AllreduceOptions)
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  // Adaptive summation (Maleki et al., Horovod's Adasum): pairs of partial results a, b combine as
  // (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, per tensor, in Horovod's vector-halving
  // distance-doubling order (Note [adasum] in src/collectives/adasum.h). Allreduce only, of
  // floating-point tensors, on a power-of-two number of ranks; postscale multiplies the result.
  kAdasum = 5,
};
inline constexpr int kNumReduceOps = 6;

// The one name of each collective, for the engine's requests, the negotiation's messages, the
// wire tag of transport frames (hence one byte), the Python constants and hora-bench.
enum class CollectiveKind : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kJoin = 5,     // see Engine::join
  kBarrier = 6,  // see Engine::barrier
};
inline constexpr int kNumCollectiveKinds = 7;

// Size of one element in bytes. Throws InvalidArgumentError for a value outside the enum.
HORA_API size_t dataTypeSize(DataType type);
HORA_API bool isFloatingPoint(DataType type);  // float16, bfloat16, float32, float64

HORA_API std::string_view toString(DataType type);
HORA_API std::string_view toString(ReduceOp op);
// "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "join", "barrier".
HORA_API std::string_view toString(CollectiveKind kind);
// Parses the names printed by toString ("float32", "sum", ...) and common aliases ("float",
// "half", "avg", "prod"). Returns nullopt for anything else.
HORA_API std::optional<DataType> parseDataType(std::string_view name);
HORA_API std::optional<ReduceOp> parseReduceOp(std::string_view name);
// Parses the names printed by toString(CollectiveKind); nullopt for anything else.
HORA_API std::optional<CollectiveKind> parseCollectiveKind(std::string_view name);

}  // namespace hora
