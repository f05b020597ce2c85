#include "engine/control_vector.h"

#include <algorithm>

namespace hora::engine {

ControlVector::ControlVector(int slots) : slots_(slots), bytes_(static_cast<size_t>(slots) + 4, 0) {
  bytes_[announceByte()] = 1;
  bytes_[runningByte()] = 1;
  bytes_[stallByte()] = 1;
  bytes_[retuneByte()] = 1;
}

void ControlVector::markEverySlotSubmitted() { std::fill_n(bytes_.begin(), slots_, uint8_t{1}); }

void ControlVector::agree(Communicator& comm) {
  comm.allreduce(bytes_.data(), bytes_.data(), bytes_.size(), DataType::kUInt8, {ReduceOp::kMin});
}

}  // namespace hora::engine
