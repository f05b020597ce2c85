// Micro-benchmark of the reduction kernels against memcpy, to check that the loops vectorize and
// run near memory speed: bytes/s counts every byte read and written (two inputs, one output),
// as memcpy's counts one read and one write.
//
//   build/release/benchmarks/reduce-benchmark --benchmark_filter=Float32
//   build/release/benchmarks/reduce-benchmark --benchmark_filter='Sum/67108864'
//       --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//
// The 64 MiB runs share the memory bus with whatever else the machine does: interleave
// repetitions and compare medians.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "collectives/reduce.h"

namespace {

using hora::DataType;
using hora::ReduceOp;

void Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
}

template <DataType T, ReduceOp Op>
void Reduce(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / hora::dataTypeSize(T);
  std::vector<std::byte> a(bytes), b(bytes);
  for (auto _ : state) {
    hora::collectives::reduce(T, Op, a.data(), a.data(), b.data(), count);  // a += b
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * bytes));
}

// The last step of an Average over 4 ranks, in place: a scaling by 1/4 (for float16 and
// bfloat16, in float32); bytes/s counts the read and the write.
template <DataType T>
void AverageFinalize(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / hora::dataTypeSize(T);
  std::vector<std::byte> a(bytes);
  for (auto _ : state) {
    hora::collectives::finalize(T, ReduceOp::kAverage, a.data(), a.data(), count, 4, 1.0);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
}

// 256 KiB: a chunk in cache, as in the ring's reduce; 64 MiB: from memory.
#define SIZES ->Arg(256 << 10)->Arg(64 << 20)
BENCHMARK(Memcpy) SIZES;
BENCHMARK(Reduce<DataType::kFloat32, ReduceOp::kSum>)->Name("Reduce/Float32Sum") SIZES;
BENCHMARK(Reduce<DataType::kFloat32, ReduceOp::kMax>)->Name("Reduce/Float32Max") SIZES;
BENCHMARK(Reduce<DataType::kFloat64, ReduceOp::kSum>)->Name("Reduce/Float64Sum") SIZES;
BENCHMARK(Reduce<DataType::kFloat16, ReduceOp::kSum>)->Name("Reduce/Float16Sum") SIZES;
BENCHMARK(Reduce<DataType::kBFloat16, ReduceOp::kSum>)->Name("Reduce/BFloat16Sum") SIZES;
BENCHMARK(Reduce<DataType::kInt32, ReduceOp::kSum>)->Name("Reduce/Int32Sum") SIZES;
BENCHMARK(Reduce<DataType::kInt8, ReduceOp::kProduct>)->Name("Reduce/Int8Product") SIZES;
BENCHMARK(Reduce<DataType::kFloat16, ReduceOp::kMax>)->Name("Reduce/Float16Max") SIZES;
BENCHMARK(AverageFinalize<DataType::kFloat32>)->Name("AverageFinalize/Float32") SIZES;
BENCHMARK(AverageFinalize<DataType::kFloat16>)->Name("AverageFinalize/Float16") SIZES;
BENCHMARK(AverageFinalize<DataType::kBFloat16>)->Name("AverageFinalize/BFloat16") SIZES;

}  // namespace

BENCHMARK_MAIN();
