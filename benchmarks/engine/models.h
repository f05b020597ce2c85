// The gradient tensors of the models the engine benchmarks simulate (engine-bench,
// autotune-bench): parameter counts in forward order.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace hora::bench {

// Parameter counts of each gradient tensor in forward order.
inline std::vector<size_t> resnet50() {
  std::vector<size_t> t{7 * 7 * 3 * 64, 64, 64};  // conv1, bn1
  size_t in = 64;
  const int blocks[] = {3, 4, 6, 3};
  const size_t widths[] = {64, 128, 256, 512};
  for (int g = 0; g < 4; ++g) {
    const size_t w = widths[g], out = 4 * w;
    for (int b = 0; b < blocks[g]; ++b) {
      t.insert(t.end(), {in * w, w, w, 9 * w * w, w, w, w * out, out, out});
      if (b == 0) t.insert(t.end(), {in * out, out, out});  // downsample conv + bn
      in = out;
    }
  }
  t.insert(t.end(), {2048 * 1000, 1000});  // fc
  return t;
}

// The source tutorial's WideResNet on 1-channel 28x28 images: depth 16, width 10.
inline std::vector<size_t> wrn16_10() {
  std::vector<size_t> t{3 * 3 * 1 * 16};
  size_t in = 16;
  for (size_t w : {160u, 320u, 640u}) {
    for (int b = 0; b < 2; ++b) {
      t.insert(t.end(), {in, in, 9 * in * w, w, w, 9 * w * w});
      if (b == 0) t.push_back(in * w);  // 1x1 shortcut
      in = w;
    }
  }
  t.insert(t.end(), {640, 640, 640 * 10, 10});
  return t;
}

inline std::vector<size_t> gradientSizes(const std::string& model) {
  return model == "resnet50" ? resnet50() : wrn16_10();
}

}  // namespace hora::bench
