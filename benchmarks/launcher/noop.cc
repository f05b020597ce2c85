// hora-noop: the smallest hora job, for timing launchers. Every rank joins the job (connects to
// all peers), then one allreduce gathers the latest moment a rank finished joining (wall clock,
// comparable across processes of one machine), and rank 0 prints it as
// "initialized_at_ns <nanoseconds since the epoch>".
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "hora/communicator.h"

int main() {
  auto comm = hora::Communicator::fromEnvironment();
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  int64_t ready = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  comm->allreduce(&ready, &ready, 1, hora::DataType::kInt64, {hora::ReduceOp::kMax});
  if (comm->rank() == 0) std::printf("initialized_at_ns %lld\n", static_cast<long long>(ready));
  return 0;
}
