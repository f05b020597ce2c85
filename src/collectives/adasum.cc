#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "collectives/reduce.h"
#include "collectives/reduce16.h"  // HORA_X86_64_V3_KERNELS
#include "hora/errors.h"

namespace hora::collectives {

using common::BFloat16;
using common::Half;
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

// out = c_mine * mine + c_theirs * theirs over n elements (out may be mine).
template <typename C>
HORA_INLINE void scaledAdd(void* out_v, const void* mine_v, const void* theirs_v, size_t n, double c_mine,
                           double c_theirs) {
  using F = typename C::Compute;
  auto* out = static_cast<typename C::Storage*>(out_v);
  const auto* mine = static_cast<const typename C::Storage*>(mine_v);
  const auto* theirs = static_cast<const typename C::Storage*>(theirs_v);
  const F cm = static_cast<F>(c_mine), ct = static_cast<F>(c_theirs);
  for (size_t i = 0; i < n; ++i)
    out[i] = C::store(cm * static_cast<F>(C::load(mine[i])) + ct * static_cast<F>(C::load(theirs[i])));
}

HORA_KERNEL void dotAndNormsKernel(DataType type, const void* mine, const void* theirs, size_t n, double out[3]) {
  switch (type) {
    case DataType::kFloat32: return dotAndNorms<Native<float>>(mine, theirs, n, out);
    case DataType::kFloat64: return dotAndNorms<Native<double>>(mine, theirs, n, out);
    case DataType::kFloat16: return dotAndNorms<Narrow<Half>>(mine, theirs, n, out);
    default: return dotAndNorms<Narrow<BFloat16>>(mine, theirs, n, out);
  }
}

HORA_KERNEL void scaledAddKernel(DataType type, void* out, const void* mine, const void* theirs, size_t n,
                                 double c_mine, double c_theirs) {
  switch (type) {
    case DataType::kFloat32: return scaledAdd<Native<float>>(out, mine, theirs, n, c_mine, c_theirs);
    case DataType::kFloat64: return scaledAdd<Native<double>>(out, mine, theirs, n, c_mine, c_theirs);
    case DataType::kFloat16: return scaledAdd<Narrow<Half>>(out, mine, theirs, n, c_mine, c_theirs);
    default: return scaledAdd<Narrow<BFloat16>>(out, mine, theirs, n, c_mine, c_theirs);
  }
}

// One rank's buffers. Before the first halving this rank's data is in `source` (the caller's send
// buffer: an out-of-place allreduce copies nothing), afterwards in `buffer`, the result; both are
// indexed by buffer position. `theirs` holds the partner's version of this rank's window,
// indexed from the window's start.
struct Buffers {
  DataType type;
  size_t elem;
  const std::byte* source;
  std::byte* buffer;
  std::byte* theirs;
};

// Sends `give` to the partner while receiving its version of window w into `theirs`, and adds up
// each tensor's sums (see Sums) chunk by chunk as the chunks land: the landed chunk is still in
// cache and the next one is on the wire (Note [transfer sets]). `mine` is this rank's data.
void exchangeAndSum(Context& ctx, int peer, const std::byte* give, size_t give_bytes, const std::byte* mine,
                    const Buffers& b, Window w, const std::vector<size_t>& offsets, bool left, Sums& sums) {
  Sums raw(sums.size(), 0.0);  // per tensor: dot, |mine|^2, |theirs|^2
  Transfer xs[2];
  size_t k = 0;
  if (give_bytes > 0) xs[k++] = Transfer::send(peer, give, give_bytes);
  if (w.size() > 0)
    xs[k++] = Transfer::recvChunks(peer, w.size() * b.elem, [&](size_t off, const std::byte* chunk, size_t len) {
      std::memcpy(b.theirs + off, chunk, len);
      const Window landed{w.lo + off / b.elem, w.lo + (off + len) / b.elem};
      for (size_t t = 0; t + 1 < offsets.size(); ++t) {
        const Window part = clip(offsets, t, landed);
        if (part.size() == 0) continue;
        double s[3];
        dotAndNormsKernel(b.type, mine + part.lo * b.elem, b.theirs + (part.lo - w.lo) * b.elem, part.size(), s);
        for (size_t j = 0; j < 3; ++j) raw[3 * t + j] += s[j];
      }
    });
  if (k > 0) ctx.transport.run(std::span<Transfer>(xs, k), ctx.tag, ctx.deadline);
  for (size_t t = 0; 3 * t < sums.size(); ++t) {
    sums[3 * t] = raw[3 * t];
    sums[3 * t + 1] = left ? raw[3 * t + 1] : raw[3 * t + 2];
    sums[3 * t + 2] = left ? raw[3 * t + 2] : raw[3 * t + 1];
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

// buffer = c_mine * mine + c_theirs * theirs over window w, with each tensor's coefficients.
void combine(const Buffers& b, const std::byte* mine, Window w, const std::vector<size_t>& offsets, bool left,
             const Sums& sums) {
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    const Window part = clip(offsets, t, w);
    if (part.size() == 0) continue;
    const double dot = sums[3 * t], left_sq = sums[3 * t + 1], right_sq = sums[3 * t + 2];
    const double c_left = left_sq >= kTinyNormSquared ? 1.0 - dot / left_sq * 0.5 : 1.0;
    const double c_right = right_sq >= kTinyNormSquared ? 1.0 - dot / right_sq * 0.5 : 1.0;
    scaledAddKernel(b.type, b.buffer + part.lo * b.elem, mine + part.lo * b.elem,
                    b.theirs + (part.lo - w.lo) * b.elem, part.size(), left ? c_left : c_right,
                    left ? c_right : c_left);
  }
}

void vhdd(Context& ctx, DataType type, const std::byte* send, std::byte* recv, size_t count,
          const std::vector<size_t>& offsets) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const size_t elem = dataTypeSize(type);
  if (n == 1) {
    if (send != recv && count > 0) std::memcpy(recv, send, count * elem);
    return;
  }
  // The partner's version of this rank's half: at most the first half of the whole buffer.
  ctx.scratch.resize(std::max(ctx.scratch.size(), (count - count / 2) * elem));
  const Buffers b{type, elem, send, recv, ctx.scratch.data()};
  Sums sums(3 * (offsets.size() - 1)), incoming(sums.size());
  std::vector<Window> parents;  // the window before each halving, for the allgather
  Window w{0, count};
  const std::byte* mine = b.source;
  for (int level = 1; level < n; level <<= 1) {
    const bool left = (r & level) == 0;
    const size_t mid = w.lo + w.size() / 2;
    const Window keep = left ? Window{w.lo, mid} : Window{mid, w.hi};
    const Window give = left ? Window{mid, w.hi} : Window{w.lo, mid};
    exchangeAndSum(ctx, r ^ level, mine + give.lo * elem, give.size() * elem, mine, b, keep, offsets, left, sums);
    parents.push_back(w);
    w = keep;
    sumOverGroup(ctx, level, sums, incoming);
    combine(b, mine, w, offsets, left, sums);
    mine = b.buffer;
  }
  for (int level = n / 2; level >= 1; level >>= 1) {
    const Window parent = parents.back();
    parents.pop_back();
    const Window other = (r & level) == 0 ? Window{w.hi, parent.hi} : Window{parent.lo, w.lo};
    exchange(ctx, r ^ level, recv + w.lo * elem, w.size() * elem, recv + other.lo * elem, other.size() * elem);
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
  if (!isFloatingPoint(type)) throw InternalError("adasum: " + std::string(toString(type)) + " reached the algorithm");
  vhdd(ctx, type, send, recv, count, tensorOffsets(count, o.tensor_counts));
  if (o.postscale != 1.0) scale(type, recv, recv, count, o.postscale);
}

}  // namespace hora::collectives
