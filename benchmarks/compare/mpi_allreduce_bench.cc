// mpi-allreduce-bench: MPI_Allreduce timed exactly as hora-bench times allreduce (same sizes,
// same columns, same JSON), so that the comparison script can put them side by side.
//
//   mpirun -np 2 mpi-allreduce-bench -b 4 -e 64M -f 4 -n 20 -w 5 --json out.json
//
// float32 sum only: the comparison's subject. Checks each result against the closed form.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace {

int64_t parseSize(const std::string& s) {
  double mult = 1;
  std::string digits = s;
  switch (s.empty() ? ' ' : s.back()) {
    case 'K': mult = 1 << 10; digits.pop_back(); break;
    case 'M': mult = 1 << 20; digits.pop_back(); break;
    case 'G': mult = 1 << 30; digits.pop_back(); break;
    default: break;
  }
  return static_cast<int64_t>(std::stod(digits) * mult);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  CLI::App app{"MPI_Allreduce benchmark with hora-bench's columns"};
  std::string min_size = "4", max_size = "64M", json;
  double factor = 4;
  int iters = 20, warmup = 5;
  app.add_option("-b", min_size);
  app.add_option("-e", max_size);
  app.add_option("-f", factor);
  app.add_option("-n", iters);
  app.add_option("-w", warmup);
  app.add_option("--json", json);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    MPI_Finalize();
    return app.exit(e);
  }
  nlohmann::json rows = nlohmann::json::array();
  const double bus = 2.0 * (n - 1) / n;
  if (rank == 0) std::printf("# mpi-allreduce-bench: %d ranks, float32, sum\n", n);
  for (double b = static_cast<double>(parseSize(min_size)); b <= static_cast<double>(parseSize(max_size)); b *= factor) {
    const size_t count = static_cast<size_t>(b) / 4;
    std::vector<float> in(count), out(count);
    nlohmann::json row{{"size", count * 4}, {"count", count}, {"type", "float32"}, {"redop", "sum"}};
    for (bool in_place : {false, true}) {
      auto fill = [&] { for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((static_cast<size_t>(rank) + i) % 5); };
      auto once = [&] {
        if (in_place) MPI_Allreduce(MPI_IN_PLACE, in.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      };
      fill();
      once();
      long long wrong = 0;
      const float* res = in_place ? in.data() : out.data();
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<double>((static_cast<size_t>(r) + i) % 5);
        if (res[i] != static_cast<float>(want)) ++wrong;
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      fill();
      for (int i = 0; i < warmup; ++i) once();
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) once();
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
      MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      const double algbw = static_cast<double>(count * 4) / (us * 1e-6) / 1e9;
      row[in_place ? "in_place" : "out_of_place"] = {{"time_us", us}, {"algbw", algbw}, {"busbw", algbw * bus}, {"wrong", wrong}};
      if (rank == 0) std::printf("%12zu %s %10.2f us %8.3f GB/s busbw, %lld wrong\n", count * 4, in_place ? "in-place    " : "out-of-place", us, algbw * bus, wrong);
    }
    rows.push_back(row);
  }
  if (rank == 0 && !json.empty())
    std::ofstream(json) << nlohmann::json{{"op", "allreduce"}, {"ranks", n}, {"type", "float32"}, {"rows", rows}}.dump(2) << "\n";
  MPI_Finalize();
  return 0;
}
