// Uses the public C++ API and the C ABI of an installed hora; exits 0 when both work.
#include <hora/c_api.h>
#include <hora/hora.h>

#include <cstdio>

int main() {
  auto comm = hora::Communicator::fromEnvironment();
  float x[2] = {1.5f, -2.0f}, y[2] = {};
  comm->allreduce(x, y, 2, hora::DataType::kFloat32, {hora::ReduceOp::kAverage});
  const float want = 1.5f;  // every rank contributes the same x
  hora_comm* c = nullptr;
  if (hora_comm_init(&c) != HORA_OK) return 2;
  const bool bad_root_caught = hora_broadcast(c, x, 2, HORA_FLOAT32, 99) == HORA_ERR_INVALID_ARGUMENT;
  hora_comm_destroy(c);
  try {
    comm->broadcast(x, 2, hora::DataType::kFloat32, -1);
    return 3;
  } catch (const hora::InvalidArgumentError&) {
  }
  std::printf("consumer: rank %d of %d, allreduce %.2f\n", comm->rank(), comm->size(), y[0]);
  return y[0] == want && bad_root_caught ? 0 : 1;
}
