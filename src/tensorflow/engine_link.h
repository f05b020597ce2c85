// The TensorFlow op library's link to hora's engine: the table hora._core hands out
// (hora/engine_access.h), set once by hora.tensorflow right after tf.load_op_library, and
// the translations between TensorFlow's C types and hora's.
//
// The library uses only TensorFlow's C API (tensorflow/c/kernels.h, ops.h), whose functions
// libtensorflow_framework.so.2 exports alike in every TensorFlow 2 release we test, so one build
// serves several TensorFlow versions (docs/architecture.md, "TensorFlow ops").
#pragma once

#include <tensorflow/c/c_api.h>

#include <string>

#include "hora/engine_access.h"

namespace hora::tf {

// The engine's table, or null before hora.tensorflow attached it.
const hora_engine_access* engine();

// hora's element type of a TensorFlow type; -1 when hora has none.
int horaTypeOf(TF_DataType type);
// The TensorFlow error code of a hora status: a disagreement between ranks is a
// FailedPreconditionError (as Horovod's), a bad argument InvalidArgument, a shut-down engine
// Aborted, a lost or silent peer Unknown (Horovod's elastic mode turns those into
// HorovodInternalError).
TF_Code codeOf(hora_status status);

}  // namespace hora::tf

// Called by hora.common.native.attach (ctypes) with hora._core.engine_access(); returns 0, or -1 when
// the table's version is not the one this library was built for.
extern "C" __attribute__((visibility("default"))) int hora_attach_engine(const hora_engine_access* access);
