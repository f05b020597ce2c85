// Adasum allreduce (src/collectives/adasum.h) against a reference written from the formula: whole
// tensors in double, combined as a pairwise tree over the ranks (0 with 1, 2 with 3, then those
// pairs, ...), which is the order vector-halving, distance-doubling combines them in. Ranks are
// threads; 2, 4 and 8 of them, every floating-point type, one tensor and several fused ones.
// Then the refusals, on every rank and before any transfer, and the engine's fused path.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "common/half.h"
#include "engine_test_util.h"
#include "expect_error.h"
#include "harness.h"

namespace hora::testing {
namespace {

using namespace std::chrono_literals;
using Vec = std::vector<double>;

// ---- The reference ----------------------------------------------------------------------------

// One tensor of two partial results: (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b, a coefficient
// staying 1 when its norm squared is below sqrt(DBL_MIN).
Vec adasumPairTensor(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa >= tiny ? 1 - dot / (2 * aa) : 1, cb = bb >= tiny ? 1 - dot / (2 * bb) : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The tree over ranks of one tensor (ranks.size() a power of two).
Vec referenceAdasum(std::vector<Vec> ranks) {
  while (ranks.size() > 1) {
    std::vector<Vec> next;
    for (size_t i = 0; i < ranks.size(); i += 2) next.push_back(adasumPairTensor(ranks[i], ranks[i + 1]));
    ranks = std::move(next);
  }
  return ranks[0];
}

// ---- Inputs -----------------------------------------------------------------------------------

// Rank r's element i: a direction every rank shares plus a rank's own part, so that the dot
// products are far from 0 and from the norms (coefficients well inside (0, 1)).
double inputValue(int r, size_t i, unsigned seed) {
  std::mt19937 shared(seed + static_cast<unsigned>(i) * 7919u);
  std::mt19937 own(seed * 31u + static_cast<unsigned>(r) * 104729u + static_cast<unsigned>(i));
  std::uniform_real_distribution<double> u(-1, 1);
  return u(shared) + 0.7 * (r + 1) * u(own);
}

// Elements of `type` as bytes, from doubles (16-bit floats round to nearest even), and back.
std::vector<std::byte> encode(DataType type, const Vec& v) {
  std::vector<std::byte> out(v.size() * dataTypeSize(type));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (type) {
      case DataType::kFloat32: reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v[i]); break;
      case DataType::kFloat64: reinterpret_cast<double*>(out.data())[i] = v[i]; break;
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(out.data())[i] = common::Half::fromFloat(static_cast<float>(v[i]));
        break;
      case DataType::kBFloat16:
        reinterpret_cast<uint16_t*>(out.data())[i] = common::BFloat16::fromFloat(static_cast<float>(v[i]));
        break;
      default: ADD_FAILURE() << "not a float type";
    }
  }
  return out;
}

Vec decode(DataType type, const std::vector<std::byte>& b) {
  Vec out(b.size() / dataTypeSize(type));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (type) {
      case DataType::kFloat32: out[i] = reinterpret_cast<const float*>(b.data())[i]; break;
      case DataType::kFloat64: out[i] = reinterpret_cast<const double*>(b.data())[i]; break;
      case DataType::kFloat16: out[i] = common::Half::toFloat(reinterpret_cast<const uint16_t*>(b.data())[i]); break;
      case DataType::kBFloat16:
        out[i] = common::BFloat16::toFloat(reinterpret_cast<const uint16_t*>(b.data())[i]);
        break;
      default: ADD_FAILURE() << "not a float type";
    }
  }
  return out;
}

// Relative tolerance per type, and the floor under it as a fraction of the tensor's largest
// magnitude: elements that nearly cancel carry the rounding of the large terms. float16 and
// bfloat16 round every partial result at every level to 11 and 8 bits, so their error is a few
// units in the last place of the largest partial result, whatever the element.
double toleranceOf(DataType type) {
  switch (type) {
    case DataType::kFloat64: return 1e-12;
    case DataType::kFloat32: return 1e-5;
    case DataType::kFloat16: return 5e-3;
    default: return 3e-2;  // bfloat16
  }
}

double floorOf(DataType type) { return type == DataType::kFloat16 || type == DataType::kBFloat16 ? 1.0 : 0.01; }

// The case: `n` ranks, tensors of `counts` laid end to end, each rank's buffer as the type holds it.
struct Case {
  int n;
  DataType type;
  std::vector<size_t> counts;
  std::vector<std::vector<std::byte>> inputs;  // per rank
  std::vector<Vec> expected;                   // per tensor

  Case(int ranks, DataType t, std::vector<size_t> tensor_counts, unsigned seed = 1)
      : n(ranks), type(t), counts(std::move(tensor_counts)) {
    size_t total = 0;
    for (size_t c : counts) total += c;
    std::vector<Vec> as_typed;  // each rank's input as the type rounded it
    for (int r = 0; r < n; ++r) {
      Vec v(total);
      for (size_t i = 0; i < total; ++i) v[i] = inputValue(r, i, seed);
      inputs.push_back(encode(type, v));
      as_typed.push_back(decode(type, inputs.back()));
    }
    size_t offset = 0;
    for (size_t c : counts) {
      std::vector<Vec> parts;
      for (const Vec& v : as_typed) parts.emplace_back(v.begin() + static_cast<long>(offset), v.begin() + static_cast<long>(offset + c));
      expected.push_back(referenceAdasum(parts));
      offset += c;
    }
  }

  // Fails the test at the first element of rank r's result off the reference (toleranceOf).
  void check(int r, const std::vector<std::byte>& result, double factor = 1.0) const {
    const Vec got = decode(type, result);
    size_t offset = 0;
    for (size_t t = 0; t < counts.size(); ++t) {
      double largest = 0;
      for (double x : expected[t]) largest = std::max(largest, std::abs(x * factor));
      for (size_t i = 0; i < counts[t]; ++i) {
        const double want = expected[t][i] * factor, have = got[offset + i];
        ASSERT_LE(std::abs(have - want), toleranceOf(type) * std::max(std::abs(want), floorOf(type) * largest))
            << "rank " << r << " of " << n << ", " << toString(type) << ", tensor " << t << " element " << i
            << ": got " << have << ", want " << want;
      }
      offset += counts[t];
    }
  }
};

// ---- The sweep --------------------------------------------------------------------------------

struct Param {
  int n;
  DataType type;
};

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return "np" + std::to_string(info.param.n) + "_" + std::string(toString(info.param.type));
}

class Adasum : public ::testing::TestWithParam<Param> {};

void runCase(const Case& c, bool fused, double prescale = 1.0, double postscale = 1.0,
             const CommunicatorOptions& options = testOptions()) {
  runThreads(c.n, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<std::byte> out(c.inputs[static_cast<size_t>(r)].size());
    AllreduceOptions o{ReduceOp::kAdasum, prescale, postscale};
    if (fused) o.tensor_counts = c.counts;
    comm.allreduce(c.inputs[static_cast<size_t>(r)].data(), out.data(), out.size() / dataTypeSize(c.type), c.type, o);
    c.check(r, out, prescale * postscale);
  }, options);
}

TEST_P(Adasum, OneTensorMatchesTheReference) {
  for (size_t count : {size_t{1}, size_t{3}, size_t{1043}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    runCase(Case(GetParam().n, GetParam().type, {count}), false);
  }
}

TEST_P(Adasum, FusedTensorsGetTheirOwnCoefficients) {
  runCase(Case(GetParam().n, GetParam().type, {5, 0, 1000, 1, 37, 260}, 2), true);
}

TEST_P(Adasum, InPlace) {
  const Case c(GetParam().n, GetParam().type, {300, 17}, 3);
  runThreads(c.n, [&](Communicator& comm) {
    std::vector<std::byte> buffer = c.inputs[static_cast<size_t>(comm.rank())];
    AllreduceOptions o{ReduceOp::kAdasum};
    o.tensor_counts = c.counts;
    comm.allreduce(buffer.data(), buffer.data(), buffer.size() / dataTypeSize(c.type), c.type, o);
    c.check(comm.rank(), buffer);
  });
}

INSTANTIATE_TEST_SUITE_P(Sweep, Adasum,
                         ::testing::Values(Param{2, DataType::kFloat32}, Param{4, DataType::kFloat32},
                                           Param{8, DataType::kFloat32}, Param{2, DataType::kFloat64},
                                           Param{4, DataType::kFloat64}, Param{8, DataType::kFloat64},
                                           Param{2, DataType::kFloat16}, Param{4, DataType::kFloat16},
                                           Param{8, DataType::kFloat16}, Param{2, DataType::kBFloat16},
                                           Param{4, DataType::kBFloat16}, Param{8, DataType::kBFloat16}),
                         paramName);

// The fused case would pass with one set of coefficients for the whole buffer only if the
// tensors happened to agree; these do not, so the reference of the buffer as one tensor differs.
TEST(AdasumReference, FusedDiffersFromOneTensorOfTheWholeBuffer) {
  const Case fused(4, DataType::kFloat64, {1, 40}, 5), whole(4, DataType::kFloat64, {41}, 5);
  double largest_difference = 0;
  for (size_t i = 0; i < 40; ++i)
    largest_difference = std::max(largest_difference, std::abs(fused.expected[1][i] - whole.expected[0][i + 1]));
  EXPECT_GT(largest_difference, 1e-3);
}

// The partner's half arrives in chunks and each chunk's dot products are added as it lands:
// 48-byte chunks split tensors and tensors end inside chunks, over shared memory and TCP.
TEST(AdasumChunks, TinyChunksSplitTensorsOverBothTransports) {
  for (TransportChoice transport : {TransportChoice::kSharedMemory, TransportChoice::kTcp}) {
    CommunicatorOptions o = testOptions();
    o.chunk_bytes = 48;
    o.transport = transport;
    runCase(Case(4, DataType::kFloat32, {5, 0, 1000, 1, 37, 260}, 9), true, 1.0, 1.0, o);
    runCase(Case(8, DataType::kFloat16, {13, 300}, 10), true, 1.0, 1.0, o);
  }
}

TEST(AdasumScales, PrescaleCancelsAndPostscaleMultiplies) {
  // The coefficients are scale-free, so Adasum of inputs times 3 is 3 times Adasum; then 1/4.
  runCase(Case(4, DataType::kFloat32, {64, 9}, 4), true, 3.0, 0.25);
}

TEST(AdasumScales, OneRankIsTheInputTimesPostscale) {
  runCase(Case(1, DataType::kFloat64, {10}, 6), false, 1.0, 0.5);
}

// ---- Refusals ---------------------------------------------------------------------------------

void expectEveryRankRefuses(int n, const std::function<void(Communicator&)>& fn, const std::string& needle) {
  const std::vector<std::string> errors = runThreadsCollectErrors(n, fn);
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_NE(errors[r].find(needle), std::string::npos) << "rank " << r << ": '" << errors[r] << "'";
}

TEST(AdasumRefuses, NonPowerOfTwoRanks) {
  for (int n : {3, 5, 6}) {
    expectEveryRankRefuses(n, [](Communicator& comm) {
      std::vector<float> v(8, 1.0f);
      comm.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, {ReduceOp::kAdasum});
    }, "power-of-two number of ranks");
  }
}

TEST(AdasumRefuses, IntegerAndBoolTensors) {
  for (DataType t : {DataType::kInt32, DataType::kInt64, DataType::kUInt8, DataType::kBool}) {
    expectEveryRankRefuses(2, [t](Communicator& comm) {
      std::vector<std::byte> v(8 * dataTypeSize(t));
      comm.allreduce(v.data(), v.data(), 8, t, {ReduceOp::kAdasum});
    }, "Adasum reduces floating-point tensors only");
  }
}

TEST(AdasumRefuses, ReducescatterAndBadTensorCounts) {
  expectEveryRankRefuses(2, [](Communicator& comm) {
    std::vector<float> in(4, 1.0f), out(2);
    const std::vector<size_t> counts{2, 2};
    comm.reducescatter(in.data(), out.data(), counts, DataType::kFloat32, {ReduceOp::kAdasum});
  }, "Adasum is an allreduce only");
  expectEveryRankRefuses(2, [](Communicator& comm) {
    std::vector<float> v(8, 1.0f);
    const std::vector<size_t> counts{3, 4};
    AllreduceOptions o{ReduceOp::kAdasum};
    o.tensor_counts = counts;
    comm.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, o);
  }, "add up to 7 elements, not the count 8");
}

// The checks the engine makes at enqueue, through the public API: the same answers as the
// collectives give, and none for what runs.
TEST(AdasumRefuses, WhyRefusedAnswersBeforeAnyCommunicatorExists) {
  const AllreduceOptions adasum{ReduceOp::kAdasum};
  EXPECT_EQ(Communicator::whyRefused(CollectiveKind::kAllreduce, DataType::kFloat32, adasum, 4), "");
  EXPECT_EQ(Communicator::whyRefused(CollectiveKind::kAllreduce, DataType::kFloat32, {ReduceOp::kSum}, 3), "");
  EXPECT_NE(Communicator::whyRefused(CollectiveKind::kAllreduce, DataType::kFloat32, adasum, 3).find("power-of-two"),
            std::string::npos);
  EXPECT_NE(Communicator::whyRefused(CollectiveKind::kReducescatter, DataType::kFloat32, adasum, 2)
                .find("Adasum is an allreduce only"),
            std::string::npos);
  EXPECT_NE(Communicator::whyRefused(CollectiveKind::kAllreduce, DataType::kInt32, adasum, 2), "");
  EXPECT_NE(Communicator::whyRefused(CollectiveKind::kAllreduce, DataType::kBool, {ReduceOp::kAverage}, 2)
                .find("bool tensors cannot be averaged"),
            std::string::npos);
}

// ---- Through the engine -----------------------------------------------------------------------

// Several small tensors submitted together are fused into one buffer: the executor hands the
// tensor boundaries down, so each still matches its own reference.
TEST(AdasumEngine, FusedTensorsMatchTheReference) {
  const std::vector<size_t> counts{7, 130, 1, 64, 500};
  const Case c(4, DataType::kFloat32, counts, 8);
  EngineOptions o;
  o.fusion_threshold = 1 << 20;
  expectNoErrors(runEngines(4, [&](Engine& e) {
    const int r = e.identity().rank;
    std::vector<std::vector<float>> bufs;
    size_t offset = 0;
    const auto* in = reinterpret_cast<const float*>(c.inputs[static_cast<size_t>(r)].data());
    for (size_t n : counts) {
      bufs.emplace_back(in + offset, in + offset + n);
      offset += n;
    }
    std::vector<Handle> hs;
    for (size_t t = 0; t < counts.size(); ++t) {
      Request q;
      q.name = indexed("adasum.", static_cast<int>(t));
      q.type = DataType::kFloat32;
      q.shape = {static_cast<int64_t>(counts[t])};
      q.input = q.output = bufs[t].data();
      q.reduce = {ReduceOp::kAdasum};
      hs.push_back(e.enqueue(q));
    }
    for (auto& h : hs) h.wait(60s);
    std::vector<std::byte> joined;
    for (const auto& b : bufs) {
      const auto* p = reinterpret_cast<const std::byte*>(b.data());
      joined.insert(joined.end(), p, p + b.size() * sizeof(float));
    }
    c.check(r, joined);
  }, o));
}

TEST(AdasumEngine, EveryRankRefusesANonPowerOfTwoSet) {
  const std::vector<std::string> errors = runEngines(3, [](Engine& e) {
    std::vector<float> v(4, 1.0f);
    Request q;
    q.name = "grad.w";
    q.shape = {4};
    q.input = q.output = v.data();
    q.reduce = {ReduceOp::kAdasum};
    Handle h = e.enqueue(q);
    try {
      h.wait(60s);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("'grad.w'"), std::string::npos) << m;
      EXPECT_NE(m.find("power-of-two number of ranks"), std::string::npos) << m;
    }
  });
  expectNoErrors(errors);
}

}  // namespace
}  // namespace hora::testing
