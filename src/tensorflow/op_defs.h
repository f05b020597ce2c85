// The definitions of hora's TensorFlow ops (op_defs.cc).
#pragma once

namespace hora::tf {
// Registers every op with TensorFlow; called once, when the library is loaded.
void defineOps();
}  // namespace hora::tf
