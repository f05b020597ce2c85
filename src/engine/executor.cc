#include "engine/executor.h"

#include <cstring>

namespace hora::engine {
namespace {

// Rows of a tensor of `rows` rows that rank `d` of `n` gets when split as evenly as possible:
// the first rows % n ranks get one more.
int64_t evenShare(int64_t rows, int n, int d) { return rows / n + (d < rows % n ? 1 : 0); }

size_t at(int i) { return static_cast<size_t>(i); }

// Where a collective's elements go, in elements, and this rank's output shape.
struct Layout {
  std::vector<size_t> counts;  // each rank's block (allgather, reducescatter); sent to each (alltoall)
  std::vector<size_t> recv;    // alltoall: received from each rank
  std::vector<int64_t> shape;
};

// Allgather: every rank's rows, stacked; scalars gather into a vector.
Layout allgatherLayout(const Response& r, const RequestMeta& mine, int size) {
  const size_t row = static_cast<size_t>(mine.rowElements());
  Layout l{std::vector<size_t>(at(size)), {}, mine.shape};
  int64_t rows = 0;
  for (int s = 0; s < size; ++s) {
    l.counts[at(s)] = static_cast<size_t>(r.metas[at(s)].rows()) * row;
    rows += r.metas[at(s)].rows();
  }
  if (l.shape.empty()) l.shape = {size};
  else l.shape[0] = rows;
  return l;
}

// Alltoall: rank d's splits say how many rows it sends to each rank (empty: evenly).
Layout alltoallLayout(const Response& r, const RequestMeta& mine, int rank, int size) {
  auto splitsOf = [&](const RequestMeta& x) {
    std::vector<int64_t> s = x.splits;
    if (s.empty()) {
      for (int d = 0; d < size; ++d) s.push_back(evenShare(x.rows(), size, d));
    }
    return s;
  };
  const size_t row = static_cast<size_t>(mine.rowElements());
  Layout l{std::vector<size_t>(at(size)), std::vector<size_t>(at(size)), mine.shape};
  const auto my_splits = splitsOf(mine);
  int64_t rows = 0;
  for (int d = 0; d < size; ++d) {
    l.counts[at(d)] = static_cast<size_t>(my_splits[at(d)]) * row;
    const int64_t in = splitsOf(r.metas[at(d)])[at(rank)];
    l.recv[at(d)] = static_cast<size_t>(in) * row;
    rows += in;
  }
  if (l.shape.empty()) l.shape = {rows};
  else l.shape[0] = rows;
  return l;
}

// Reducescatter: rank d keeps its even share of the rows; a scalar stays one element.
Layout reducescatterLayout(const RequestMeta& mine, int rank, int size) {
  const size_t row = static_cast<size_t>(mine.rowElements());
  const int64_t rows = mine.rows();
  Layout l{std::vector<size_t>(at(size)), {}, mine.shape};
  for (int d = 0; d < size; ++d) l.counts[at(d)] = static_cast<size_t>(evenShare(rows, size, d)) * row;
  if (l.shape.empty()) l.shape = {1};
  else l.shape[0] = evenShare(rows, size, rank);
  return l;
}

}  // namespace

Executor::Executor(Communicator& comm, Tracer& tracer, FindMine find_mine, Finish finish)
    : comm_(comm), tracer_(tracer), find_mine_(std::move(find_mine)), finish_(std::move(finish)),
      rank_(comm.rank()), size_(comm.size()) {}

void Executor::allreduce(std::span<const Response> group) {
  const Response& head = group[0];
  const RequestMeta& first = head.metas[at(rank_)];
  // With joined ranks, Average still divides by every rank of the set, their zeros included:
  // Horovod's semantics (Note [join]).
  const AllreduceOptions o{first.reduce_op, first.prescale, first.postscale};
  const size_t elem = dataTypeSize(first.type);
  size_t total = 0;
  for (const Response& r : group) total += static_cast<size_t>(r.metas[at(rank_)].elements());
  std::string args;
  if (tracer_.active()) {
    args = "{\"algorithm\":\"" + comm_.algorithmFor(CollectiveKind::kAllreduce, total * elem, o.op) +
           "\",\"bytes\":" + std::to_string(total * elem) + ",\"tensors\":" + std::to_string(group.size()) + "}";
    for (const Response& r : group) tracer_.end(r.name);  // QUEUE
  }
  Submission* mine = group.size() == 1 ? find_mine_(head.name) : nullptr;
  if (!mine) {
    allreduceFused(group, args, o);
    return;
  }
  tracer_.begin(head.name, "ALLREDUCE", args);
  comm_.allreduce(mine->request.input, mine->request.output, total, first.type, o);
  tracer_.end(head.name);
  finish_(head.name, mine->meta.shape);
}

void Executor::allreduceFused(std::span<const Response> group, const std::string& args, const AllreduceOptions& o) {
  const DataType type = group[0].metas[at(rank_)].type;
  const size_t elem = dataTypeSize(type);
  auto bytesOf = [&](const Response& r) { return static_cast<size_t>(r.metas[at(rank_)].elements()) * elem; };
  size_t total = 0;
  for (const Response& r : group) total += bytesOf(r);
  if (fusion_.size() < total) fusion_.resize(total);
  size_t offset = 0;
  for (const Response& r : group) {
    const size_t bytes = bytesOf(r);
    const Submission* mine = find_mine_(r.name);
    tracer_.begin(r.name, "MEMCPY_IN_FUSION_BUFFER");
    if (bytes && mine) std::memcpy(fusion_.data() + offset, mine->request.input, bytes);
    else if (bytes) std::memset(fusion_.data() + offset, 0, bytes);
    tracer_.end(r.name);
    offset += bytes;
  }
  // Adasum's coefficients are per tensor: it is told where each one lies in the buffer.
  std::vector<size_t> counts;
  for (const Response& r : group) counts.push_back(bytesOf(r) / elem);
  AllreduceOptions fused = o;
  if (o.op == ReduceOp::kAdasum) fused.tensor_counts = counts;
  for (const Response& r : group) tracer_.begin(r.name, "ALLREDUCE", args);
  comm_.allreduce(fusion_.data(), fusion_.data(), total / elem, type, fused);
  for (const Response& r : group) tracer_.end(r.name);
  offset = 0;
  for (const Response& r : group) {
    const size_t bytes = bytesOf(r);
    if (Submission* mine = find_mine_(r.name)) {
      tracer_.begin(r.name, "MEMCPY_OUT_FUSION_BUFFER");
      if (bytes) std::memcpy(mine->request.output, fusion_.data() + offset, bytes);
      tracer_.end(r.name);
      finish_(r.name, mine->meta.shape);
    }
    offset += bytes;
  }
}

void Executor::run(const Response& r) {
  Submission* mine = find_mine_(r.name);
  if (!mine) {
    // This rank joined: of the collectives that go on with joined ranks, only barrier is left.
    if (r.metas[0].op == CollectiveKind::kBarrier) comm_.barrier();
    return;
  }
  const RequestMeta& m = mine->meta;
  if (tracer_.active()) {
    const size_t bytes = static_cast<size_t>(m.elements()) * dataTypeSize(m.type);
    tracer_.end(r.name);  // QUEUE
    // A join moves no data: it has no algorithm to name.
    const std::string algorithm =
        m.op == CollectiveKind::kJoin ? "" : "\"algorithm\":\"" + comm_.algorithmFor(m.op, bytes) + "\",";
    tracer_.begin(r.name, eventNameOf(m.op), "{" + algorithm + "\"bytes\":" + std::to_string(bytes) + "}");
  }
  std::vector<int64_t> shape = m.shape;
  switch (m.op) {
    case CollectiveKind::kAllreduce:
      break;  // executed by allreduce()
    case CollectiveKind::kJoin:
      *static_cast<int32_t*>(mine->request.output) = r.last_joined;
      break;
    case CollectiveKind::kBarrier:
      comm_.barrier();
      break;
    case CollectiveKind::kBroadcast:
      broadcast(*mine);
      break;
    case CollectiveKind::kAllgather:
      shape = allgather(r, *mine);
      break;
    case CollectiveKind::kAlltoall:
      shape = alltoall(r, *mine);
      break;
    case CollectiveKind::kReducescatter:
      shape = reducescatter(*mine);
      break;
  }
  tracer_.end(r.name);
  finish_(r.name, std::move(shape));  // the response's name: finishing releases `mine`
}

void Executor::broadcast(Submission& mine) {
  const RequestMeta& m = mine.meta;
  const size_t count = static_cast<size_t>(m.elements());
  if (mine.request.output != mine.request.input && count)
    std::memcpy(mine.request.output, mine.request.input, count * dataTypeSize(m.type));
  comm_.broadcast(mine.request.output, count, m.type, m.root);
}

std::vector<int64_t> Executor::allgather(const Response& r, Submission& mine) {
  Layout l = allgatherLayout(r, mine.meta, size_);
  void* out = mine.request.allocate_output(l.shape);
  comm_.allgather(mine.request.input, l.counts[at(rank_)], out, l.counts, mine.meta.type);
  return std::move(l.shape);
}

std::vector<int64_t> Executor::alltoall(const Response& r, Submission& mine) {
  Layout l = alltoallLayout(r, mine.meta, rank_, size_);
  void* out = mine.request.allocate_output(l.shape);
  comm_.alltoall(mine.request.input, l.counts, out, l.recv, mine.meta.type);
  return std::move(l.shape);
}

std::vector<int64_t> Executor::reducescatter(Submission& mine) {
  const RequestMeta& m = mine.meta;
  Layout l = reducescatterLayout(m, rank_, size_);
  void* out = mine.request.allocate_output(l.shape);
  comm_.reducescatter(mine.request.input, out, l.counts, m.type, {m.reduce_op, m.prescale, m.postscale});
  return std::move(l.shape);
}

}  // namespace hora::engine
