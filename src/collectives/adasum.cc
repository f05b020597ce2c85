#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "collectives/half.h"
#include "collectives/reduce.h"
#include "collectives/reduce16.h"  // HORA_X86_64_V3_KERNELS
#include "hora/errors.h"

namespace hora::collectives {

using transport::Transfer;

namespace {

// How the elements of a type are read and written. `Compute` is the type the combination is
// evaluated in (Note [adasum]).
template <typename T>
struct Native {
  using Storage = T;
  using Compute = double;
  static double load(T x) { return static_cast<double>(x); }
  static T store(double v) { return static_cast<T>(v); }
};

template <typename Codec16>
struct Narrow {
  using Storage = uint16_t;
  using Compute = float;
  static double load(uint16_t x) { return Codec16::toFloat(x); }
  static uint16_t store(float v) { return Codec16::fromFloat(v); }
};

// A range [lo, hi) of the buffer, in elements.
struct Window {
  size_t lo = 0, hi = 0;
  size_t size() const { return hi - lo; }
};

// Below this, a norm squared counts as zero and its coefficient stays 1 (Horovod's threshold).
const double kTinyNormSquared = std::sqrt(DBL_MIN);

// Per tensor t, three sums over the part of t inside a window: [3t] the dot product of the two
// versions, [3t + 1] the norm squared of the left rank's version, [3t + 2] the right rank's.
using Sums = std::vector<double>;

constexpr size_t kLanes = 8;

// Sends `out_bytes` from `out` to the partner while receiving `in_bytes` into `in`. A side with
// nothing to move is left out: both ranks know the sizes, so they leave out the same frames.
void exchange(Context& ctx, int peer, const void* out, size_t out_bytes, void* in, size_t in_bytes) {
  Transfer xs[2];
  size_t k = 0;
  if (out_bytes > 0) xs[k++] = Transfer::send(peer, out, out_bytes);
  if (in_bytes > 0) xs[k++] = Transfer::recv(peer, in, in_bytes);
  if (k > 0) ctx.transport.run(std::span<Transfer>(xs, k), ctx.tag, ctx.deadline);
}

// The part of tensor t (offsets[t], offsets[t + 1]) inside w.
Window clip(const std::vector<size_t>& offsets, size_t t, Window w) {
  const size_t lo = std::max(w.lo, offsets[t]), hi = std::min(w.hi, offsets[t + 1]);
  return lo < hi ? Window{lo, hi} : Window{lo, lo};
}

#if HORA_X86_64_V3_KERNELS
#define HORA_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HORA_KERNEL
#endif
// The loops are inlined into the two kernels below, which are compiled for baseline x86-64 and
// for x86-64-v3 (AVX2, FMA), chosen at load time as the reduction kernels are (reduce.cc).
#define HORA_INLINE [[gnu::always_inline]] inline

// dot(mine, theirs), |mine|^2, |theirs|^2 over [lo, hi); `mine` and `theirs` start at lo.
template <typename C>
HORA_INLINE void dotAndNorms(const void* mine_v, const void* theirs_v, size_t n, double out[3]) {
  const auto* mine = static_cast<const typename C::Storage*>(mine_v);
  const auto* theirs = static_cast<const typename C::Storage*>(theirs_v);
  // kLanes independent partial sums: one chain of dependent additions per sum would leave the
  // loop waiting on the adder's latency, and independent lanes let the compiler vectorize.
  double dots[kLanes] = {}, mms[kLanes] = {}, tts[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const double a = C::load(mine[i + l]), b = C::load(theirs[i + l]);
      dots[l] += a * b;
      mms[l] += a * a;
      tts[l] += b * b;
    }
  }
  for (; i < n; ++i) {
    const double a = C::load(mine[i]), b = C::load(theirs[i]);
    dots[0] += a * b;
    mms[0] += a * a;
    tts[0] += b * b;
  }
  out[0] = out[1] = out[2] = 0;
  for (size_t l = 0; l < kLanes; ++l) {
    out[0] += dots[l];
    out[1] += mms[l];
    out[2] += tts[l];
  }
}

template <typename C>
HORA_INLINE void scaledAdd(void* mine_v, const void* theirs_v, size_t n, double c_mine, double c_theirs) {
  using F = typename C::Compute;
  auto* mine = static_cast<typename C::Storage*>(mine_v);
  const auto* theirs = static_cast<const typename C::Storage*>(theirs_v);
  const F cm = static_cast<F>(c_mine), ct = static_cast<F>(c_theirs);
  for (size_t i = 0; i < n; ++i)
    mine[i] = C::store(cm * static_cast<F>(C::load(mine[i])) + ct * static_cast<F>(C::load(theirs[i])));
}

HORA_KERNEL void dotAndNormsKernel(DataType type, const void* mine, const void* theirs, size_t n, double out[3]) {
  switch (type) {
    case DataType::kFloat32: return dotAndNorms<Native<float>>(mine, theirs, n, out);
    case DataType::kFloat64: return dotAndNorms<Native<double>>(mine, theirs, n, out);
    case DataType::kFloat16: return dotAndNorms<Narrow<Half>>(mine, theirs, n, out);
    default: return dotAndNorms<Narrow<BFloat16>>(mine, theirs, n, out);
  }
}

HORA_KERNEL void scaledAddKernel(DataType type, void* mine, const void* theirs, size_t n, double c_mine,
                                 double c_theirs) {
  switch (type) {
    case DataType::kFloat32: return scaledAdd<Native<float>>(mine, theirs, n, c_mine, c_theirs);
    case DataType::kFloat64: return scaledAdd<Native<double>>(mine, theirs, n, c_mine, c_theirs);
    case DataType::kFloat16: return scaledAdd<Narrow<Half>>(mine, theirs, n, c_mine, c_theirs);
    default: return scaledAdd<Narrow<BFloat16>>(mine, theirs, n, c_mine, c_theirs);
  }
}

// The buffer of one rank during the algorithm: its own data, indexed by buffer position, and
// the partner's version of its window, indexed from the window's start.
struct Halves {
  DataType type;
  size_t elem;
  std::byte* mine;
  std::byte* theirs;
  const std::byte* mineAt(size_t i) const { return mine + i * elem; }
};

// Sums of this rank's window (see Sums).
void localSums(const Halves& h, Window w, const std::vector<size_t>& offsets, bool left, Sums& sums) {
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    const Window part = clip(offsets, t, w);
    double s[3] = {0, 0, 0};
    if (part.size() > 0) dotAndNormsKernel(h.type, h.mineAt(part.lo), h.theirs + (part.lo - w.lo) * h.elem, part.size(), s);
    sums[3 * t] = s[0];
    sums[3 * t + 1] = left ? s[1] : s[2];
    sums[3 * t + 2] = left ? s[2] : s[1];
  }
}

// Adds up `sums` over the 2 * level ranks of this rank's group by recursive doubling inside it.
// Each step adds the same two numbers on both partners (in either order: addition commutes), so
// every rank of the group ends with the same coefficients.
void sumOverGroup(Context& ctx, int level, Sums& sums, Sums& incoming) {
  const int r = ctx.transport.rank();
  const size_t bytes = sums.size() * sizeof(double);
  for (int k = 1; k <= level; k <<= 1) {
    exchange(ctx, r ^ k, sums.data(), bytes, incoming.data(), bytes);
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += incoming[i];
  }
}

// mine = c_mine * mine + c_theirs * theirs over the window, with each tensor's coefficients.
void combine(const Halves& h, Window w, const std::vector<size_t>& offsets, bool left, const Sums& sums) {
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    const Window part = clip(offsets, t, w);
    if (part.size() == 0) continue;
    const double dot = sums[3 * t], left_sq = sums[3 * t + 1], right_sq = sums[3 * t + 2];
    const double c_left = left_sq >= kTinyNormSquared ? 1.0 - dot / left_sq * 0.5 : 1.0;
    const double c_right = right_sq >= kTinyNormSquared ? 1.0 - dot / right_sq * 0.5 : 1.0;
    scaledAddKernel(h.type, h.mine + part.lo * h.elem, h.theirs + (part.lo - w.lo) * h.elem, part.size(),
                    left ? c_left : c_right, left ? c_right : c_left);
  }
}

void vhdd(Context& ctx, DataType type, std::byte* buffer, size_t count, const std::vector<size_t>& offsets) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const size_t elem = dataTypeSize(type);
  // The partner's version of this rank's half: at most the first half of the whole buffer.
  ctx.scratch.resize(std::max(ctx.scratch.size(), (count - count / 2) * elem));
  const Halves h{type, elem, buffer, ctx.scratch.data()};
  Sums sums(3 * (offsets.size() - 1)), incoming(sums.size());
  std::vector<Window> parents;  // the window before each halving, for the allgather
  Window w{0, count};
  for (int level = 1; level < n; level <<= 1) {
    const bool left = (r & level) == 0;
    const size_t mid = w.lo + w.size() / 2;
    const Window keep = left ? Window{w.lo, mid} : Window{mid, w.hi};
    const Window give = left ? Window{mid, w.hi} : Window{w.lo, mid};
    exchange(ctx, r ^ level, buffer + give.lo * elem, give.size() * elem, h.theirs, keep.size() * elem);
    parents.push_back(w);
    w = keep;
    localSums(h, w, offsets, left, sums);
    sumOverGroup(ctx, level, sums, incoming);
    combine(h, w, offsets, left, sums);
  }
  for (int level = n / 2; level >= 1; level >>= 1) {
    const Window parent = parents.back();
    parents.pop_back();
    const Window other = (r & level) == 0 ? Window{w.hi, parent.hi} : Window{parent.lo, w.lo};
    exchange(ctx, r ^ level, buffer + w.lo * elem, w.size() * elem, buffer + other.lo * elem, other.size() * elem);
    w = parent;
  }
}

std::vector<size_t> tensorOffsets(size_t count, std::span<const size_t> tensor_counts) {
  if (tensor_counts.empty()) return {0, count};
  return offsetsOf(tensor_counts);
}

}  // namespace

std::string whyNotAdasum(int ranks, size_t count, std::span<const size_t> tensor_counts) {
  if (ranks < 1 || (ranks & (ranks - 1)) != 0)
    return "Adasum needs a power-of-two number of ranks (Horovod's vector-halving, distance-doubling "
           "algorithm); there are " + std::to_string(ranks);
  size_t total = 0;
  for (size_t c : tensor_counts) total += c;
  if (!tensor_counts.empty() && total != count)
    return "Adasum's tensor counts add up to " + std::to_string(total) + " elements, not the count " +
           std::to_string(count);
  return {};
}

void adasumAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count, DataType type,
                     const AllreduceOptions& o) {
  const size_t bytes = count * dataTypeSize(type);
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
  const std::vector<size_t> offsets = tensorOffsets(count, o.tensor_counts);
  if (!isFloatingPoint(type)) throw InternalError("adasum: " + std::string(toString(type)) + " reached the algorithm");
  vhdd(ctx, type, recv, count, offsets);
  if (o.postscale != 1.0) scale(type, recv, recv, count, o.postscale);
}

}  // namespace hora::collectives
