#include "collectives/algorithms.h"

#include <cstring>
#include <memory>

#include "collectives/adasum.h"
#include "collectives/reduce.h"
#include "hora/errors.h"

namespace hora::collectives {

using transport::Transfer;

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

std::byte* scratchOf(Context& ctx, size_t bytes) {
  if (ctx.scratch.size() < bytes) ctx.scratch.resize(bytes);
  return ctx.scratch.data();
}

// Note [ring schedule]: with n ranks and segments 0..n-1, at reduce-scatter step s (0..n-2)
// rank r sends segment r-s-1 to its right neighbour and receives segment r-s-2 from its left
// one, reducing it with its own input into the accumulator. The segment sent at step s > 0 is
// the one reduced at step s-1, so its send is gated on that receive's progress: partial sums
// travel on chunk by chunk. After step n-2 rank r holds segment r fully reduced. Each rank
// reduces every segment except r-1 exactly once, always as acc = input + incoming, so no copy
// of the input is needed even out of place. Allgather step s then sends segment r-s and
// receives segment r-s-1 straight into the output.
struct RingPlan {
  int n, r, left, right;
  std::vector<size_t> offsets;  // element offsets of the segments
  size_t elem;
  size_t segBytes(int s) const { return (offsets[static_cast<size_t>(s) + 1] - offsets[static_cast<size_t>(s)]) * elem; }
  size_t segOffset(int s) const { return offsets[static_cast<size_t>(s)] * elem; }
};

RingPlan planRing(const transport::Transport& t, std::span<const size_t> counts, DataType type) {
  const int n = t.size(), r = t.rank();
  return {n, r, mod(r - 1, n), mod(r + 1, n), offsetsOf(counts), dataTypeSize(type)};
}

// Appends the reduce-scatter transfers. acc(s) is where segment s's partial sums go.
// Returns the index of the last receive (whose `done` tracks segment r's completion).
template <typename AccFn>
size_t addReduceScatter(std::vector<Transfer>& xs, const RingPlan& p, const std::byte* send,
                        AccFn acc, DataType type, const AllreduceOptions& o) {
  size_t last_recv = SIZE_MAX;
  for (int s = 0; s < p.n - 1; ++s) {
    const int out_seg = mod(p.r - s - 1, p.n);
    const std::byte* src = s == 0 ? send + p.segOffset(out_seg) : acc(out_seg);
    xs.push_back(Transfer::send(p.right, src, p.segBytes(out_seg),
                                s == 0 ? nullptr : &xs[last_recv].done));
    const int in_seg = mod(p.r - s - 2, p.n);
    const bool final_step = s == p.n - 2;
    std::byte* dst = acc(in_seg);
    const std::byte* mine = send + p.segOffset(in_seg);
    const size_t elem = p.elem;
    const int n = p.n;
    xs.push_back(Transfer::recvChunks(
        p.left, p.segBytes(in_seg),
        [=](size_t off, const std::byte* chunk, size_t len) {
          reduce(type, o.op, dst + off, mine + off, chunk, len / elem);
          if (final_step) finalize(type, o.op, dst + off, dst + off, len / elem, n, o.postscale);
        }));
    last_recv = xs.size() - 1;
  }
  return last_recv;
}

}  // namespace

std::vector<size_t> offsetsOf(std::span<const size_t> counts) {
  std::vector<size_t> off(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) off[i + 1] = off[i] + counts[i];
  return off;
}

void ringAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                   DataType type, const AllreduceOptions& o) {
  const int n = ctx.transport.size();
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s)
    counts[static_cast<size_t>(s)] = count / n + (static_cast<size_t>(s) < count % n ? 1 : 0);
  const RingPlan p = planRing(ctx.transport, counts, type);
  std::vector<Transfer> xs;
  xs.reserve(4 * static_cast<size_t>(n));  // pointers into xs must stay valid: no reallocation
  auto acc = [&](int s) { return recv + p.segOffset(s); };
  const size_t reduced = addReduceScatter(xs, p, send, acc, type, o);
  size_t prev_recv = reduced;
  for (int s = 0; s < n - 1; ++s) {
    const int out_seg = mod(p.r - s, n);
    xs.push_back(Transfer::send(p.right, acc(out_seg), p.segBytes(out_seg), &xs[prev_recv].done));
    const int in_seg = mod(p.r - s - 1, n);
    xs.push_back(Transfer::recv(p.left, acc(in_seg), p.segBytes(in_seg)));
    prev_recv = xs.size() - 1;
  }
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void ringReduceScatter(Context& ctx, const std::byte* send, std::byte* recv,
                       std::span<const size_t> counts, DataType type, const AllreduceOptions& o) {
  const RingPlan p = planRing(ctx.transport, counts, type);
  // Partial sums of the segments this rank does not own live in scratch.
  std::byte* scratch = scratchOf(ctx, p.offsets.back() * p.elem);
  auto acc = [&](int s) { return s == p.r ? recv : scratch + p.segOffset(s); };
  std::vector<Transfer> xs;
  xs.reserve(2 * static_cast<size_t>(p.n));
  addReduceScatter(xs, p, send, acc, type, o);
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void recursiveDoublingAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                                DataType type, const AllreduceOptions& o) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const size_t bytes = count * dataTypeSize(type);
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
  std::byte* incoming = scratchOf(ctx, bytes);
  auto exchange = [&](int peer, bool give, bool take) {
    // On the stack: a heap vector per step was a measurable part of a small allreduce.
    Transfer xs[2];
    size_t k = 0;
    if (give) xs[k++] = Transfer::send(peer, recv, bytes);
    if (take) xs[k++] = Transfer::recv(peer, incoming, bytes);
    ctx.transport.run(std::span<Transfer>(xs, k), ctx.tag, ctx.deadline);
    if (take) reduce(type, o.op, recv, recv, incoming, count);
  };
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int extra = n - pof2;
  // Fold: among the first 2*extra ranks, even ones hand their data to the odd neighbour and sit
  // out; the rest continue with a virtual rank in [0, pof2).
  int vrank;
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      exchange(r + 1, true, false);
      vrank = -1;
    } else {
      exchange(r - 1, false, true);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < extra ? vpeer * 2 + 1 : vpeer + extra;
      exchange(peer, true, true);
    }
    finalize(type, o.op, recv, recv, count, n, o.postscale);
  }
  if (r < 2 * extra) {
    Transfer xs[1] = {r % 2 == 1 ? Transfer::send(r - 1, recv, bytes) : Transfer::recv(r + 1, recv, bytes)};
    ctx.transport.run(xs, ctx.tag, ctx.deadline);
  }
}

void disseminationAllreduce(Context& ctx, const std::byte* send, std::byte* recv, size_t count,
                            DataType type, const AllreduceOptions& o) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const size_t bytes = count * dataTypeSize(type);
  if (send != recv && bytes > 0) std::memcpy(recv, send, bytes);
  std::byte* incoming = scratchOf(ctx, bytes);
  for (int distance = 1; distance < n; distance <<= 1) {
    Transfer xs[] = {Transfer::send(mod(r + distance, n), recv, bytes),
                     Transfer::recv(mod(r - distance, n), incoming, bytes)};
    ctx.transport.run(xs, ctx.tag, ctx.deadline);  // both done before recv changes below
    reduce(type, o.op, recv, recv, incoming, count);
  }
  finalize(type, o.op, recv, recv, count, n, o.postscale);
}

void ringAllgather(Context& ctx, const std::byte* send, std::byte* recv,
                   std::span<const size_t> counts, DataType type) {
  const RingPlan p = planRing(ctx.transport, counts, type);
  std::byte* own = recv + p.segOffset(p.r);
  if (send != own && p.segBytes(p.r) > 0) std::memmove(own, send, p.segBytes(p.r));
  std::vector<Transfer> xs;
  xs.reserve(2 * static_cast<size_t>(p.n));
  size_t prev_recv = SIZE_MAX;
  for (int s = 0; s < p.n - 1; ++s) {
    const int out_block = mod(p.r - s, p.n);
    xs.push_back(Transfer::send(p.right, recv + p.segOffset(out_block), p.segBytes(out_block),
                                s == 0 ? nullptr : &xs[prev_recv].done));
    const int in_block = mod(p.r - s - 1, p.n);
    xs.push_back(Transfer::recv(p.left, recv + p.segOffset(in_block), p.segBytes(in_block)));
    prev_recv = xs.size() - 1;
  }
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void binomialTreeBroadcast(Context& ctx, std::byte* buffer, size_t bytes, int root) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const int v = mod(r - root, n);  // rank relative to the root
  auto real = [&](int vr) { return mod(vr + root, n); };
  std::vector<Transfer> xs;
  xs.reserve(64);
  const size_t* ready = nullptr;  // the root has everything; others forward what arrived
  // v receives from v minus its lowest set bit, sends to v + 2^k for every 2^k below that bit.
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      xs.push_back(Transfer::recv(real(v - mask), buffer, bytes));
      ready = &xs.back().done;
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) xs.push_back(Transfer::send(real(v + mask), buffer, bytes, ready));
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void chainBroadcast(Context& ctx, std::byte* buffer, size_t bytes, int root) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const int v = mod(r - root, n);  // rank relative to the root
  std::vector<Transfer> xs;
  xs.reserve(2);  // `ready` points into it
  const size_t* ready = nullptr;
  if (v > 0) {
    xs.push_back(Transfer::recv(mod(v - 1 + root, n), buffer, bytes));
    ready = &xs.back().done;
  }
  if (v < n - 1) xs.push_back(Transfer::send(mod(v + 1 + root, n), buffer, bytes, ready));
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void pairwiseAlltoall(Context& ctx, const std::byte* send, std::span<const size_t> send_counts,
                      std::byte* recv, std::span<const size_t> recv_counts, DataType type) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  const size_t elem = dataTypeSize(type);
  const auto soff = offsetsOf(send_counts), roff = offsetsOf(recv_counts);
  const auto ur = static_cast<size_t>(r);
  // In place is not supported by the API; blocks may still overlap if the caller aliases, so
  // memmove.
  if (send_counts[ur] > 0)
    std::memmove(recv + roff[ur] * elem, send + soff[ur] * elem, send_counts[ur] * elem);
  std::vector<Transfer> xs;
  xs.reserve(2 * static_cast<size_t>(n));
  for (int s = 1; s < n; ++s) {
    const auto to = static_cast<size_t>(mod(r + s, n)), from = static_cast<size_t>(mod(r - s, n));
    xs.push_back(Transfer::send(static_cast<int>(to), send + soff[to] * elem, send_counts[to] * elem));
    xs.push_back(Transfer::recv(static_cast<int>(from), recv + roff[from] * elem, recv_counts[from] * elem));
  }
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void disseminationBarrier(Context& ctx) {
  const int n = ctx.transport.size(), r = ctx.transport.rank();
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  auto tokens = std::make_unique<std::byte[]>(static_cast<size_t>(rounds) + 1);
  std::vector<Transfer> xs;
  xs.reserve(2 * static_cast<size_t>(rounds));
  const size_t* ready = nullptr;
  for (int k = 0; k < rounds; ++k) {
    // Round k's token leaves only after round k-1's arrived.
    xs.push_back(Transfer::send(mod(r + (1 << k), n), &tokens[0], 1, ready));
    xs.push_back(Transfer::recv(mod(r - (1 << k), n), &tokens[static_cast<size_t>(k) + 1], 1));
    ready = &xs.back().done;
  }
  ctx.transport.run(xs, ctx.tag, ctx.deadline);
}

void allreduce(Context& ctx, Algorithm algorithm, const std::byte* send, std::byte* recv, size_t count,
               DataType type, const AllreduceOptions& options) {
  if (algorithm == Algorithm::kAdasum) adasumAllreduce(ctx, send, recv, count, type, options);
  else if (algorithm == Algorithm::kDissemination) disseminationAllreduce(ctx, send, recv, count, type, options);
  else if (algorithm == Algorithm::kRecursiveDoubling) recursiveDoublingAllreduce(ctx, send, recv, count, type, options);
  else ringAllreduce(ctx, send, recv, count, type, options);
}

void broadcast(Context& ctx, Algorithm algorithm, std::byte* buffer, size_t bytes, int root) {
  if (algorithm == Algorithm::kBinomialTree) binomialTreeBroadcast(ctx, buffer, bytes, root);
  else chainBroadcast(ctx, buffer, bytes, root);
}

}  // namespace hora::collectives
