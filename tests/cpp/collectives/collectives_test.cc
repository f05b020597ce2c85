// Correctness sweep: every collective x data type x reduce op x size, in place and out of place,
// for world sizes 1, 2, 3, 4, 5 and 8, against the reference of reference.h. Ranks are threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "harness.h"
#include "reference.h"

namespace hora::testing {
namespace {

constexpr DataType kAllTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                                  DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBool};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kProduct};

// The huge sizes (2^20+3 and 16 Mi elements) can be skipped in sanitizer builds.
bool largeSizes() {
  const char* v = std::getenv("HORA_TEST_LARGE");
  return v == nullptr || std::string(v) != "0";
}

std::vector<size_t> smallCounts(int n) {
  return {0, 1, 7, static_cast<size_t>(n > 1 ? n - 1 : 2), 1023};
}

// How the algorithms are forced: the defaults, everything through the ring with tiny chunks
// (many chunks per segment, so the pipelining is exercised), or recursive doubling throughout.
// The ranks are threads of one host, so these run over shared memory; the kTcp modes force TCP.
// The kHybrid modes put the ranks on two pretend hosts, alternately (rank 0, 2, ... on one), so
// each collective mixes shared-memory and TCP peers (Note [mixed transfer sets]); kHybrid keeps
// the hierarchical collectives on (when the hosts are even), kHybridFlatTinyChunks forces the
// flat algorithms.
enum class Mode { kDefault, kRingTinyChunks, kTreeOnly, kTcp, kTcpRingTinyChunks, kHybrid, kHybridFlatTinyChunks };

CommunicatorOptions optionsFor(Mode m) {
  CommunicatorOptions o = testOptions();
  if (m == Mode::kTcp || m == Mode::kTcpRingTinyChunks) o.transport = TransportChoice::kTcp;
  if (m == Mode::kHybridFlatTinyChunks)
    o.hierarchical = o.hierarchical_allgather = o.hierarchical_broadcast = HierarchyChoice::kNever;
  if (m == Mode::kRingTinyChunks || m == Mode::kTcpRingTinyChunks || m == Mode::kHybridFlatTinyChunks) {
    o.ring_threshold_bytes = o.shm_ring_threshold_bytes = 0;
    o.chunk_bytes = 48;
  } else if (m == Mode::kTreeOnly) {
    o.ring_threshold_bytes = o.shm_ring_threshold_bytes = SIZE_MAX;
  }
  return o;
}

struct Param {
  int size;
  Mode mode;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << "np" << p.size << " mode " << static_cast<int>(p.mode);
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  static const char* kModes[] = {"default", "ring_tiny_chunks", "tree_only", "tcp", "tcp_ring_tiny_chunks",
                                 "hybrid", "hybrid_flat_tiny_chunks"};
  return "np" + std::to_string(info.param.size) + "_" + kModes[static_cast<int>(info.param.mode)];
}

class Collectives : public ::testing::TestWithParam<Param> {
 protected:
  int n() const { return GetParam().size; }
  CommunicatorOptions options() const { return optionsFor(GetParam().mode); }
  bool hybrid() const { return GetParam().mode == Mode::kHybrid || GetParam().mode == Mode::kHybridFlatTinyChunks; }
  bool large() const {
    const Mode m = GetParam().mode;
    return largeSizes() && (m == Mode::kDefault || m == Mode::kTcp || m == Mode::kHybrid);
  }
  void runRanks(const std::function<void(Communicator&)>& fn) const {
    std::vector<std::string> hosts;
    for (int r = 0; hybrid() && r < n(); ++r) hosts.push_back("host" + std::to_string(r % 2));
    runThreads(n(), fn, options(), hosts);
  }
};

// Checks `count` elements of `got` against expectedReduction; returns the number of mismatches
// and reports the first few.
int checkReduced(const std::string& what, DataType t, ReduceOp op, int size, const void* got,
                 size_t first, size_t count, double pre, double post) {
  int wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = expectedReduction(t, op, size, first + i, pre, post);
    if (!isFloat(t)) {  // round like the type: integer results wrap into their width
      std::vector<std::byte> tmp(8);
      encode(t, tmp.data(), 0, want);
      want = decode(t, tmp.data(), 0);
    }
    const double have = decode(t, got, i);
    if (std::fabs(have - want) > tolerance(t, want)) {
      if (wrong++ < 3)
        ADD_FAILURE() << what << " element " << first + i << ": got " << have << ", want " << want;
    }
  }
  return wrong;
}

void runAllreduce(Communicator& c, DataType t, ReduceOp op, size_t count, bool in_place,
                  double pre = 1, double post = 1) {
  auto in = makeBuffer(t, count), out = makeBuffer(t, count);
  for (size_t i = 0; i < count; ++i) encode(t, in.data(), i, inputFor(t, c.rank(), i, op));
  const auto original = in;
  void* dst = in_place ? in.data() : out.data();
  c.allreduce(in.data(), dst, count, t, {op, pre, post});
  const std::string what = "allreduce " + std::string(toString(t)) + " " + std::string(toString(op)) +
                           " count " + std::to_string(count) + (in_place ? " in place" : "") +
                           " rank " + std::to_string(c.rank());
  checkReduced(what, t, op, c.size(), dst, 0, count, pre, post);
  if (!in_place) {
    EXPECT_EQ(in, original) << what << ": input modified";
  }
}

TEST_P(Collectives, Allreduce) {
  runRanks([&](Communicator& c) {
    for (DataType t : kAllTypes)
      for (ReduceOp op : kAllOps)
        for (size_t count : smallCounts(n()))
          for (bool in_place : {false, true})
            if (reducible(t, op)) runAllreduce(c, t, op, count, in_place);
    // Scale factors: exact ones on the floating types, ones that truncate on the integers.
    for (DataType t : kAllTypes)
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax})
        if (t != DataType::kBool) runAllreduce(c, t, op, 1023, false, isFloat(t) ? 2.0 : 1.5, isFloat(t) ? 0.5 : 0.7);
    if (large()) {
      for (DataType t : kAllTypes) runAllreduce(c, t, ReduceOp::kSum, (1 << 20) + 3, false);
      runAllreduce(c, DataType::kFloat32, ReduceOp::kAverage, (1 << 20) + 3, true, 1.0, 3.0);
      if (n() <= 3) {
        runAllreduce(c, DataType::kFloat32, ReduceOp::kSum, size_t{16} << 20, false);
        runAllreduce(c, DataType::kFloat32, ReduceOp::kMax, size_t{16} << 20, true);
      }
    }
  });
}

// Block counts for rank r that differ between ranks (and are 0 for some).
std::vector<size_t> unevenCounts(int size, size_t base) {
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) counts[static_cast<size_t>(r)] = base == 0 ? 0 : base + static_cast<size_t>(r) * 3 % 5;
  return counts;
}

void runAllgather(Communicator& c, DataType t, const std::vector<size_t>& counts, bool in_place) {
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r];
  const auto me = static_cast<size_t>(c.rank());
  auto out = makeBuffer(t, total);
  auto in = makeBuffer(t, counts[me]);
  // Element j of rank r's block is inputFor(t, r, j); an in-place send lives inside `out`.
  std::byte* send = in_place ? out.data() + offsets[me] * elemSize(t) : in.data();
  for (size_t j = 0; j < counts[me]; ++j) encode(t, send, j, inputFor(t, c.rank(), j, ReduceOp::kSum));
  c.allgather(send, counts[me], out.data(), counts, t);
  int wrong = 0;
  for (size_t r = 0; r < counts.size(); ++r)
    for (size_t j = 0; j < counts[r]; ++j) {
      const double want = inputFor(t, static_cast<int>(r), j, ReduceOp::kSum);
      const double have = decode(t, out.data(), offsets[r] + j);
      if (have != want && wrong++ < 3)
        ADD_FAILURE() << "allgather " << toString(t) << " total " << total << " block " << r
                      << " element " << j << ": got " << have << ", want " << want;
    }
}

TEST_P(Collectives, Allgather) {
  runRanks([&](Communicator& c) {
    for (DataType t : kAllTypes)
      for (size_t count : smallCounts(n()))
        for (bool in_place : {false, true}) {
          runAllgather(c, t, std::vector<size_t>(static_cast<size_t>(n()), count), in_place);
          runAllgather(c, t, unevenCounts(n(), count), in_place);
        }
    if (large()) {
      runAllgather(c, DataType::kFloat32, unevenCounts(n(), ((1 << 20) + 3) / static_cast<size_t>(n())), false);
      if (n() <= 3)
        runAllgather(c, DataType::kFloat32, std::vector<size_t>(static_cast<size_t>(n()), (size_t{16} << 20) / static_cast<size_t>(n())), true);
    }
  });
}

void runBroadcast(Communicator& c, DataType t, size_t count, int root) {
  auto buf = makeBuffer(t, count);
  for (size_t i = 0; i < count; ++i)
    encode(t, buf.data(), i, c.rank() == root ? inputFor(t, root, i, ReduceOp::kSum) : 99);
  c.broadcast(buf.data(), count, t, root);
  int wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const double want = inputFor(t, root, i, ReduceOp::kSum), have = decode(t, buf.data(), i);
    if (have != want && wrong++ < 3)
      ADD_FAILURE() << "broadcast " << toString(t) << " count " << count << " root " << root
                    << " rank " << c.rank() << " element " << i << ": got " << have << ", want " << want;
  }
}

TEST_P(Collectives, Broadcast) {
  runRanks([&](Communicator& c) {
    for (DataType t : kAllTypes)
      for (size_t count : smallCounts(n()))
        for (int root = 0; root < n(); ++root) runBroadcast(c, t, count, root);
    if (large()) {
      runBroadcast(c, DataType::kFloat64, (1 << 20) + 3, n() - 1);
      if (n() <= 3) runBroadcast(c, DataType::kFloat32, size_t{16} << 20, 0);
    }
  });
}

void runReducescatter(Communicator& c, DataType t, ReduceOp op, const std::vector<size_t>& counts,
                      bool in_place) {
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const auto me = static_cast<size_t>(c.rank());
  size_t offset = 0;
  for (size_t r = 0; r < me; ++r) offset += counts[r];
  auto in = makeBuffer(t, total), out = makeBuffer(t, counts[me]);
  for (size_t i = 0; i < total; ++i) encode(t, in.data(), i, inputFor(t, c.rank(), i, op));
  std::byte* dst = in_place ? in.data() + offset * elemSize(t) : out.data();
  c.reducescatter(in.data(), dst, counts, t, {op, 1.0, 1.0});
  checkReduced("reducescatter " + std::string(toString(t)) + " " + std::string(toString(op)) +
                   " total " + std::to_string(total) + (in_place ? " in place" : ""),
               t, op, c.size(), dst, offset, counts[me], 1.0, 1.0);
}

TEST_P(Collectives, Reducescatter) {
  runRanks([&](Communicator& c) {
    for (DataType t : kAllTypes)
      for (ReduceOp op : kAllOps)
        for (size_t count : smallCounts(n()))
          for (bool in_place : {false, true}) {
            if (!reducible(t, op)) continue;
            runReducescatter(c, t, op, std::vector<size_t>(static_cast<size_t>(n()), count), in_place);
            runReducescatter(c, t, op, unevenCounts(n(), count), in_place);
          }
    if (large()) {
      runReducescatter(c, DataType::kFloat32, ReduceOp::kSum, unevenCounts(n(), ((1 << 20) + 3) / static_cast<size_t>(n())), false);
      if (n() <= 3)
        runReducescatter(c, DataType::kBFloat16, ReduceOp::kSum, std::vector<size_t>(static_cast<size_t>(n()), (size_t{16} << 20) / static_cast<size_t>(n())), true);
    }
  });
}

void runAlltoall(Communicator& c, DataType t, size_t base) {
  const int n = c.size(), me = c.rank();
  // Rank s sends base + (s + d) % 3 elements to rank d; element j of that block is
  // inputFor(t, s * n + d, j).
  auto countFrom = [&](int s, int d) { return base == 0 ? size_t{0} : base + static_cast<size_t>((s + d) % 3); };
  std::vector<size_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) send_counts[static_cast<size_t>(d)] = countFrom(me, d);
  EXPECT_EQ(c.exchangeCounts(send_counts), [&] {
    std::vector<size_t> v(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) v[static_cast<size_t>(s)] = countFrom(s, me);
    return v;
  }());
  for (int s = 0; s < n; ++s) recv_counts[static_cast<size_t>(s)] = countFrom(s, me);
  const size_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  const size_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
  auto in = makeBuffer(t, send_total), out = makeBuffer(t, recv_total);
  size_t k = 0;
  for (int d = 0; d < n; ++d)
    for (size_t j = 0; j < send_counts[static_cast<size_t>(d)]; ++j)
      encode(t, in.data(), k++, inputFor(t, me * n + d, j, ReduceOp::kSum));
  c.alltoall(in.data(), send_counts, out.data(), recv_counts, t);
  k = 0;
  int wrong = 0;
  for (int s = 0; s < n; ++s)
    for (size_t j = 0; j < recv_counts[static_cast<size_t>(s)]; ++j, ++k) {
      const double want = inputFor(t, s * n + me, j, ReduceOp::kSum), have = decode(t, out.data(), k);
      if (have != want && wrong++ < 3)
        ADD_FAILURE() << "alltoall " << toString(t) << " from rank " << s << " element " << j
                      << ": got " << have << ", want " << want;
    }
}

TEST_P(Collectives, Alltoall) {
  runRanks([&](Communicator& c) {
    for (DataType t : kAllTypes)
      for (size_t count : smallCounts(n())) runAlltoall(c, t, count);
    if (large())
      runAlltoall(c, DataType::kInt32, ((1 << 20) + 3) / static_cast<size_t>(n()));
  });
}

TEST_P(Collectives, BarrierAndMixedSequence) {
  runRanks([&](Communicator& c) {
    for (int i = 0; i < 20; ++i) {
      c.barrier();
      runAllreduce(c, DataType::kFloat32, ReduceOp::kSum, static_cast<size_t>(i * 37), i % 2 == 0);
      runBroadcast(c, DataType::kInt8, static_cast<size_t>(i), i % c.size());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizes, Collectives,
    ::testing::Values(Param{1, Mode::kDefault}, Param{2, Mode::kDefault}, Param{3, Mode::kDefault},
                      Param{4, Mode::kDefault}, Param{5, Mode::kDefault}, Param{8, Mode::kDefault},
                      Param{2, Mode::kRingTinyChunks}, Param{3, Mode::kRingTinyChunks},
                      Param{5, Mode::kRingTinyChunks}, Param{3, Mode::kTreeOnly},
                      Param{5, Mode::kTreeOnly}, Param{8, Mode::kTreeOnly}, Param{2, Mode::kTcp},
                      Param{3, Mode::kTcp}, Param{5, Mode::kTcp}, Param{3, Mode::kTcpRingTinyChunks},
                      Param{4, Mode::kHybrid}, Param{5, Mode::kHybrid}, Param{4, Mode::kHybridFlatTinyChunks},
                      Param{5, Mode::kHybridFlatTinyChunks}),
    paramName);

}  // namespace
}  // namespace hora::testing
