// hora-bench: collective bandwidth and latency in the style of nccl-tests.
//
//   horarun -np 2 hora-bench allreduce -b 8 -e 128M -f 2 -d float32 -o sum -n 20 -w 5 -c 1
//
// For each size (bytes of the whole message, as nccl-tests) it times `iters` calls after
// `warmup` untimed ones, out of place and in place, and prints time (the slowest rank's
// average), algbw = size / time and busbw = algbw x the collective's bus factor (GB = 1e9).
// With -c 1 it checks one result per size against a closed form and counts wrong elements
// across ranks; the exit code is 1 if any is wrong.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "common/half.h"
#include "common/knobs.h"
#include "hora/communicator.h"
#include "hora/errors.h"

namespace {

using hora::CollectiveKind;
using hora::DataType;
using hora::ReduceOp;
using Clock = std::chrono::steady_clock;

// The collectives hora-bench times; join and barrier move no data.
constexpr CollectiveKind kBenchmarked[] = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                                           CollectiveKind::kBroadcast, CollectiveKind::kReducescatter,
                                           CollectiveKind::kAlltoall};

struct Config {
  CollectiveKind op = CollectiveKind::kAllreduce;
  std::string op_name;
  int64_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  DataType type = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  int root = 0;
  int iters = 20, warmup = 5;
  bool check = true;
  std::string json;
};

double busFactor(CollectiveKind op, int n) {
  switch (op) {
    case CollectiveKind::kAllreduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kBroadcast: return 1.0;
    default: return static_cast<double>(n - 1) / n;
  }
}

// Element values with exact reductions: small integers (products of 1s and 2s). Adasum's inputs
// are alike on every rank: Adasum of equal vectors is that vector (both coefficients are 1/2),
// exactly, while it still computes every dot product.
double valueOf(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<double>((rank + i) % 2 + 1);
  if (op == ReduceOp::kAdasum) return static_cast<double>(i % 5);
  return static_cast<double>((static_cast<size_t>(rank) + i) % 5);
}

void store(DataType t, std::byte* p, size_t i, double v) {
  switch (t) {
    case DataType::kUInt8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::kInt32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: reinterpret_cast<uint16_t*>(p)[i] = hora::common::Half::fromFloat(static_cast<float>(v)); break;
    case DataType::kBFloat16: reinterpret_cast<uint16_t*>(p)[i] = hora::common::BFloat16::fromFloat(static_cast<float>(v)); break;
    case DataType::kFloat32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: reinterpret_cast<double*>(p)[i] = v; break;
    case DataType::kInt16: reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::kBool: reinterpret_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

double load(DataType t, const std::byte* p, size_t i) {
  switch (t) {
    case DataType::kUInt8: return reinterpret_cast<const uint8_t*>(p)[i];
    case DataType::kInt8: return reinterpret_cast<const int8_t*>(p)[i];
    case DataType::kInt32: return reinterpret_cast<const int32_t*>(p)[i];
    case DataType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case DataType::kFloat16: return hora::common::Half::toFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: return hora::common::BFloat16::toFloat(reinterpret_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32: return reinterpret_cast<const float*>(p)[i];
    case DataType::kFloat64: return reinterpret_cast<const double*>(p)[i];
    case DataType::kInt16: return reinterpret_cast<const int16_t*>(p)[i];
    case DataType::kBool: return reinterpret_cast<const uint8_t*>(p)[i] != 0 ? 1 : 0;
  }
  return 0;
}

// What `op` over n ranks gives at element i. bool: Sum and Max are or, Product and Min and, of
// the inputs' truth, which on 0 and 1 are max and min.
double reduced(ReduceOp input_op, int n, size_t i, DataType type) {
  const bool floating = hora::isFloatingPoint(type);
  auto valueAt = [&](int r) {
    const double v = valueOf(r, i, input_op);
    return type == DataType::kBool ? (v != 0 ? 1.0 : 0.0) : v;
  };
  ReduceOp op = input_op;
  if (type == DataType::kBool && op == ReduceOp::kSum) op = ReduceOp::kMax;
  if (type == DataType::kBool && op == ReduceOp::kProduct) op = ReduceOp::kMin;
  double acc = valueAt(0);
  for (int r = 1; r < n; ++r) {
    const double x = valueAt(r);
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAverage: acc += x; break;
      case ReduceOp::kProduct: acc *= x; break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
      case ReduceOp::kAdasum: acc = x; break;  // every rank holds the same vector (valueOf)
    }
  }
  if (op == ReduceOp::kAverage) acc = floating ? acc / n : std::trunc(acc / n);
  return acc;
}

// One size of one collective: buffers laid out as the collective wants them.
class Case {
 public:
  Case(hora::Communicator& c, const Config& cfg, size_t count)
      : c_(c), cfg_(cfg), n_(c.size()), count_(count), elem_(hora::dataTypeSize(cfg.type)) {
    const auto un = static_cast<size_t>(n_);
    per_rank_ = count_ / un;
    counts_.assign(un, per_rank_);
    switch (cfg.op) {
      case CollectiveKind::kAllreduce: case CollectiveKind::kBroadcast: in_elems_ = out_elems_ = count_; break;
      case CollectiveKind::kAllgather: in_elems_ = per_rank_; out_elems_ = per_rank_ * un; break;
      case CollectiveKind::kReducescatter: in_elems_ = per_rank_ * un; out_elems_ = per_rank_; break;
      case CollectiveKind::kAlltoall: in_elems_ = out_elems_ = per_rank_ * un; break;
      default: throw hora::InvalidArgumentError("hora-bench does not time " + std::string(hora::toString(cfg.op)));
    }
    in_.resize(std::max<size_t>(in_elems_ * elem_, 1));
    out_.resize(std::max<size_t>(std::max(out_elems_, in_elems_) * elem_, 1));
  }

  void fill() {
    for (size_t i = 0; i < in_elems_; ++i) store(cfg_.type, in_.data(), i, valueOf(c_.rank(), i, cfg_.redop));
  }

  void run(bool in_place) {
    std::byte* in = in_.data();
    std::byte* out = out_.data();
    const auto me = static_cast<size_t>(c_.rank());
    switch (cfg_.op) {
      case CollectiveKind::kAllreduce: c_.allreduce(in, in_place ? in : out, count_, cfg_.type, {cfg_.redop}); break;
      case CollectiveKind::kBroadcast: c_.broadcast(in, count_, cfg_.type, cfg_.root); break;
      case CollectiveKind::kAllgather:
        // In place: this rank's block already sits at its offset in the output.
        c_.allgather(in_place ? out + me * per_rank_ * elem_ : in, per_rank_, out, counts_, cfg_.type);
        break;
      case CollectiveKind::kReducescatter:
        c_.reducescatter(in, in_place ? in + me * per_rank_ * elem_ : out, counts_, cfg_.type, {cfg_.redop});
        break;
      case CollectiveKind::kAlltoall: c_.alltoall(in, counts_, out, counts_, cfg_.type); break;
      default: break;  // refused by the constructor
    }
  }

  // Runs once on fresh inputs and counts wrong elements on this rank.
  int64_t check(bool in_place) {
    fill();
    if (cfg_.op == CollectiveKind::kAllgather && in_place) {
      const auto me = static_cast<size_t>(c_.rank());
      for (size_t i = 0; i < per_rank_; ++i)
        store(cfg_.type, out_.data(), me * per_rank_ + i, valueOf(c_.rank(), i, cfg_.redop));
    }
    run(in_place);
    const bool floating = hora::isFloatingPoint(cfg_.type);
    const auto me = static_cast<size_t>(c_.rank());
    int64_t wrong = 0;
    auto expect = [&](const std::byte* buf, size_t i, double want) {
      if (cfg_.type == DataType::kBool) want = want != 0 ? 1 : 0;  // as store() writes it
      const double have = load(cfg_.type, buf, i);
      if (std::fabs(have - want) > (floating ? 1e-2 * std::max(1.0, std::fabs(want)) : 0)) ++wrong;
    };
    switch (cfg_.op) {
      case CollectiveKind::kAllreduce:
        for (size_t i = 0; i < count_; ++i) expect(in_place ? in_.data() : out_.data(), i, reduced(cfg_.redop, n_, i, cfg_.type));
        break;
      case CollectiveKind::kBroadcast:
        for (size_t i = 0; i < count_; ++i) expect(in_.data(), i, valueOf(cfg_.root, i, cfg_.redop));
        break;
      case CollectiveKind::kAllgather:
        for (size_t r = 0; r < static_cast<size_t>(n_); ++r)
          for (size_t i = 0; i < per_rank_; ++i) expect(out_.data(), r * per_rank_ + i, valueOf(static_cast<int>(r), i, cfg_.redop));
        break;
      case CollectiveKind::kReducescatter: {
        const std::byte* res = in_place ? in_.data() + me * per_rank_ * elem_ : out_.data();
        for (size_t i = 0; i < per_rank_; ++i) expect(res, i, reduced(cfg_.redop, n_, me * per_rank_ + i, cfg_.type));
        break;
      }
      case CollectiveKind::kAlltoall:
        for (size_t s = 0; s < static_cast<size_t>(n_); ++s)
          for (size_t i = 0; i < per_rank_; ++i) expect(out_.data(), s * per_rank_ + i, valueOf(static_cast<int>(s), me * per_rank_ + i, cfg_.redop));
        break;
      default: break;  // refused by the constructor
    }
    return wrong;
  }

  // Slowest rank's average time per call, in microseconds.
  double time(bool in_place) {
    for (int i = 0; i < cfg_.warmup; ++i) run(in_place);
    c_.barrier();
    const auto start = Clock::now();
    for (int i = 0; i < cfg_.iters; ++i) run(in_place);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / cfg_.iters;
    c_.allreduce(&us, &us, 1, DataType::kFloat64, {ReduceOp::kMax});
    return us;
  }

  bool supportsInPlace() const { return cfg_.op != CollectiveKind::kAlltoall; }

 private:
  hora::Communicator& c_;
  const Config& cfg_;
  int n_;
  size_t count_, elem_, per_rank_ = 0, in_elems_ = 0, out_elems_ = 0;
  std::vector<size_t> counts_;
  std::vector<std::byte> in_, out_;
};

int run(const Config& cfg) {
  auto comm = hora::Communicator::fromEnvironment();
  hora::Communicator& c = *comm;
  const int n = c.size();
  const bool lead = c.rank() == 0;
  const size_t elem = hora::dataTypeSize(cfg.type);
  const bool reduces = cfg.op == CollectiveKind::kAllreduce || cfg.op == CollectiveKind::kReducescatter;
  if (lead) {
    std::printf("# hora-bench %s: %d ranks, %s, %s, iters %d, warmup %d, check %d\n", cfg.op_name.c_str(), n,
                std::string(hora::toString(cfg.type)).c_str(),
                reduces ? std::string(hora::toString(cfg.redop)).c_str() : "none", cfg.iters, cfg.warmup,
                cfg.check ? 1 : 0);
    std::printf("#%71s%38s\n", "out-of-place", "in-place");
    std::printf("# %12s %12s %8s %7s %5s %10s %8s %8s %7s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
                "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %12s %12s %8s %7s %5s %10s %8s %8s %7s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  nlohmann::json rows = nlohmann::json::array();
  double busbw_sum = 0;
  int rows_count = 0;
  int64_t wrong_total = 0;
  const size_t granule = elem * (cfg.op == CollectiveKind::kAllreduce || cfg.op == CollectiveKind::kBroadcast ? 1 : static_cast<size_t>(n));
  for (double b = static_cast<double>(cfg.min_bytes); b <= static_cast<double>(cfg.max_bytes) * 1.0000001;
       b = cfg.factor > 1 ? b * cfg.factor : b + static_cast<double>(cfg.max_bytes)) {
    const size_t bytes = static_cast<size_t>(b) / granule * granule;
    const size_t count = bytes / elem;
    Case cs(c, cfg, count);
    nlohmann::json row{{"size", bytes}, {"count", count}, {"type", hora::toString(cfg.type)},
                       {"redop", reduces ? std::string(hora::toString(cfg.redop)) : "none"}, {"root", cfg.root}};
    std::string line;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "  %12zu %12zu %8s %7s %5d", bytes, count, std::string(hora::toString(cfg.type)).c_str(),
                  reduces ? std::string(hora::toString(cfg.redop)).c_str() : "none",
                  cfg.op == CollectiveKind::kBroadcast ? cfg.root : -1);
    line += buf;
    for (bool in_place : {false, true}) {
      if (in_place && !cs.supportsInPlace()) {
        line += "        n/a      n/a      n/a     n/a";
        continue;
      }
      int64_t wrong = 0;
      if (cfg.check) {
        wrong = cs.check(in_place);
        c.allreduce(&wrong, &wrong, 1, DataType::kInt64, {ReduceOp::kSum});
      }
      cs.fill();
      const double us = cs.time(in_place);
      const double algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
      const double busbw = algbw * busFactor(cfg.op, n);
      std::snprintf(buf, sizeof(buf), " %10.2f %8.3f %8.3f %7s", us, algbw, busbw,
                    cfg.check ? std::to_string(wrong).c_str() : "N/A");
      line += buf;
      row[in_place ? "in_place" : "out_of_place"] = {{"time_us", us}, {"algbw", algbw}, {"busbw", busbw}, {"wrong", wrong}};
      busbw_sum += busbw;
      ++rows_count;
      wrong_total += wrong;
    }
    if (lead) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    rows.push_back(row);
    if (cfg.max_bytes == cfg.min_bytes) break;
  }
  if (lead) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.4f\n", rows_count ? busbw_sum / rows_count : 0.0);
    if (!cfg.json.empty()) {
      nlohmann::json doc{{"op", cfg.op_name}, {"ranks", n}, {"type", hora::toString(cfg.type)}, {"iters", cfg.iters},
                         {"warmup", cfg.warmup}, {"rows", rows}};
      std::ofstream(cfg.json) << doc.dump(2) << "\n";
    }
  }
  return wrong_total ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hora-bench: collective bandwidth in the style of nccl-tests. Run it under horarun."};
  Config cfg;
  std::string type = "float32", redop = "sum", min_size = "8", max_size = "64M";
  int check = 1;
  std::vector<std::string> ops;
  for (CollectiveKind k : kBenchmarked) ops.emplace_back(hora::toString(k));
  app.add_option("op", cfg.op_name, "The collective to time")->required()
      ->check(CLI::IsMember(ops));
  app.add_option("-b,--minbytes", min_size, "Smallest size in bytes (K, M, G suffixes)");
  app.add_option("-e,--maxbytes", max_size, "Largest size in bytes (K, M, G suffixes)");
  app.add_option("-f,--stepfactor", cfg.factor, "Multiply the size by this between rows")->check(CLI::Range(1.0, 1e6));
  app.add_option("-d,--datatype", type, "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool");
  app.add_option("-o,--op", redop, "sum, average, min, max, product, adasum (a power-of-two number of ranks)");
  app.add_option("-r,--root", cfg.root, "Root of broadcast");
  app.add_option("-n,--iters", cfg.iters, "Timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup_iters", cfg.warmup, "Untimed iterations per size")->check(CLI::Range(0, 1000000));
  app.add_option("-c,--check", check, "Check results (0 or 1)")->check(CLI::Range(0, 1));
  app.add_option("--json", cfg.json, "Also write the table as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  cfg.op = *hora::parseCollectiveKind(cfg.op_name);  // one of kBenchmarked: checked above
  cfg.check = check == 1;
  auto t = hora::parseDataType(type);
  auto o = hora::parseReduceOp(redop);
  auto lo = hora::common::parseBytes(min_size), hi = hora::common::parseBytes(max_size);
  if (!t) { std::cerr << "hora-bench: unknown data type '" << type << "' for -d\n"; return 2; }
  if (!o) { std::cerr << "hora-bench: unknown reduce op '" << redop << "' for -o\n"; return 2; }
  if (!lo || !hi || *lo > *hi) { std::cerr << "hora-bench: -b/-e must be sizes with -b <= -e\n"; return 2; }
  cfg.type = *t;
  cfg.redop = *o;
  cfg.min_bytes = *lo;
  cfg.max_bytes = *hi;
  try {
    return run(cfg);
  } catch (const hora::Error& e) {
    std::cerr << "hora-bench: " << e.what() << "\n";
    return 3;
  }
}
