// A rank that leaves without hora::torch::shutdown(), as a program does when an exception ends
// main() after init(). Usage: hora_torch_exit_without_shutdown <return|exit|throw>
//   return: main returns 0; exit: std::exit(0) from inside a function; throw: an exception
//   caught in main, which returns 0.
// The job must end with every rank's status 0: before init() registered its shutdown with
// atexit, the engine was destroyed among the library's static objects, after OpenSSL had freed
// what its heartbeat's HMAC needs, and the rank died of SIGSEGV.
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "hora/torch.h"

namespace hvd = hora::torch;

namespace {

void train(const std::string& how) {
  hvd::init();
  auto sum = hvd::allreduce(torch::ones({4}), {.op = hora::ReduceOp::kSum});
  if (sum[0].item<float>() != static_cast<float>(hvd::size())) {
    std::cerr << "allreduce gave " << sum[0].item<float>() << ", not " << hvd::size() << "\n";
    std::exit(2);
  }
  if (how == "exit") std::exit(0);
  if (how == "throw") throw std::runtime_error("the training loop failed");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "return";
  try {
    train(how);
  } catch (const std::exception& e) {
    std::cerr << "caught: " << e.what() << "\n";
  }
  return 0;
}
