#include "collectives/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "collectives/half.h"
#include "collectives/reduce.h"
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

// Sums of this rank's window; `mine` is indexed by buffer position, `theirs` from w.lo.
template <typename C>
void localSums(const typename C::Storage* mine, const typename C::Storage* theirs, Window w,
               const std::vector<size_t>& offsets, bool left, Sums& sums) {
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    const Window part = clip(offsets, t, w);
    double dot = 0, mm = 0, tt = 0;
    for (size_t i = part.lo; i < part.hi; ++i) {
      const double a = C::load(mine[i]), b = C::load(theirs[i - w.lo]);
      dot += a * b;
      mm += a * a;
      tt += b * b;
    }
    sums[3 * t] = dot;
    sums[3 * t + 1] = left ? mm : tt;
    sums[3 * t + 2] = left ? tt : mm;
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
template <typename C>
void combine(typename C::Storage* mine, const typename C::Storage* theirs, Window w,
             const std::vector<size_t>& offsets, bool left, const Sums& sums) {
  using F = typename C::Compute;
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    const Window part = clip(offsets, t, w);
    if (part.size() == 0) continue;
    const double dot = sums[3 * t], left_sq = sums[3 * t + 1], right_sq = sums[3 * t + 2];
    const double c_left = left_sq >= kTinyNormSquared ? 1.0 - dot / left_sq * 0.5 : 1.0;
    const double c_right = right_sq >= kTinyNormSquared ? 1.0 - dot / right_sq * 0.5 : 1.0;
    const F c_mine = static_cast<F>(left ? c_left : c_right), c_theirs = static_cast<F>(left ? c_right : c_left);
    for (size_t i = part.lo; i < part.hi; ++i)
      mine[i] = C::store(c_mine * static_cast<F>(C::load(mine[i])) + c_theirs * static_cast<F>(C::load(theirs[i - w.lo])));
  }
}

template <typename C>
void vhdd(Context& ctx, std::byte* buffer, size_t count, const std::vector<size_t>& offsets) {
  using S = typename C::Storage;
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  S* data = reinterpret_cast<S*>(buffer);
  // The partner's version of this rank's half: at most the first half of the whole buffer.
  ctx.scratch.resize(std::max(ctx.scratch.size(), (count - count / 2) * sizeof(S)));
  S* theirs = reinterpret_cast<S*>(ctx.scratch.data());
  Sums sums(3 * (offsets.size() - 1)), incoming(sums.size());
  std::vector<Window> parents;  // the window before each halving, for the allgather
  Window w{0, count};
  for (int level = 1; level < n; level <<= 1) {
    const bool left = (r & level) == 0;
    const size_t mid = w.lo + w.size() / 2;
    const Window keep = left ? Window{w.lo, mid} : Window{mid, w.hi};
    const Window give = left ? Window{mid, w.hi} : Window{w.lo, mid};
    exchange(ctx, r ^ level, data + give.lo, give.size() * sizeof(S), theirs, keep.size() * sizeof(S));
    parents.push_back(w);
    w = keep;
    localSums<C>(data, theirs, w, offsets, left, sums);
    sumOverGroup(ctx, level, sums, incoming);
    combine<C>(data, theirs, w, offsets, left, sums);
  }
  for (int level = n / 2; level >= 1; level >>= 1) {
    const Window parent = parents.back();
    parents.pop_back();
    const Window other = (r & level) == 0 ? Window{w.hi, parent.hi} : Window{parent.lo, w.lo};
    exchange(ctx, r ^ level, data + w.lo, w.size() * sizeof(S), data + other.lo, other.size() * sizeof(S));
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
  switch (type) {
    case DataType::kFloat32: vhdd<Native<float>>(ctx, recv, count, offsets); break;
    case DataType::kFloat64: vhdd<Native<double>>(ctx, recv, count, offsets); break;
    case DataType::kFloat16: vhdd<Narrow<Half>>(ctx, recv, count, offsets); break;
    case DataType::kBFloat16: vhdd<Narrow<BFloat16>>(ctx, recv, count, offsets); break;
    default: throw InternalError("adasum: " + std::string(toString(type)) + " reached the algorithm");
  }
  if (o.postscale != 1.0) scale(type, recv, recv, count, o.postscale);
}

}  // namespace hora::collectives
