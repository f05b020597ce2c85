// Uses an installed hora::torch: averages a tensor over the ranks; exits 0 when it is right.
#include <hora/torch.h>

#include <cstdio>

int main() {
  hora::torch::init();
  at::Tensor mean = hora::torch::allreduce(at::full({3}, double(hora::torch::rank())));
  const double want = (hora::torch::size() - 1) / 2.0;
  std::printf("torch consumer: rank %d of %d, mean %.2f\n", hora::torch::rank(), hora::torch::size(),
              mean[0].item<double>());
  const bool right = at::allclose(mean, at::full({3}, want));
  hora::torch::shutdown();
  return right ? 0 : 1;
}
