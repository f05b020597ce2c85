// The ops' definitions (names, attrs, inputs, outputs, shapes), registered through TensorFlow's C
// API when tf.load_op_library loads this library. They follow Horovod's (horovod/tensorflow/
// mpi_ops.cc) under hora's names, plus `tensor_name`: in eager mode TensorFlow names every
// kernel after its op, so a name given to hvd.allreduce(..., name=) reaches the engine only
// through an attr.
//
// Outputs whose first dimension only negotiation knows (allgather, alltoall, reducescatter) get
// an unknown shape here, because the C API cannot build a shape with one unknown dimension;
// hora.tensorflow sets the known part on the Python side.
#include <tensorflow/c/ops.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "tensorflow/op_defs.h"

namespace hora::tf {
namespace {

using ShapeFn = void (*)(TF_ShapeInferenceContext*, TF_Status*);

// Output i has input i's shape, for every output.
void sameShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* shape = TF_NewShapeHandle();
  const int64_t n = TF_ShapeInferenceContextNumInputs(ctx);
  for (int i = 0; i < n && TF_GetCode(status) == TF_OK; ++i) {
    TF_ShapeInferenceContextGetInput(ctx, i, shape, status);
    if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, i, shape, status);
  }
  TF_DeleteShapeHandle(shape);
}

void unknownShapes(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeInferenceContextSetUnknownShape(ctx, status);  // every output
}

void scalar(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* shape = TF_ShapeInferenceContextScalar(ctx);
  TF_ShapeInferenceContextSetOutput(ctx, 0, shape, status);
  TF_DeleteShapeHandle(shape);
}

// A collective is a side effect across processes: stateful, so that no graph optimization
// folds it away or prunes it on one rank while the others wait for it (e.g. grappler turning
// Horovod's `broadcast gradient * 0` into zeros on the ranks that are not the root).
// hora.tensorflow also lets tf.function run them independently of each other (mpi_ops.py).
enum class Kind { kCollective, kTopology };

void define(Kind kind, const char* name, std::initializer_list<const char*> attrs,
            std::initializer_list<const char*> inputs, std::initializer_list<const char*> outputs, ShapeFn shape) {
  TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder(name);
  TF_OpDefinitionBuilderSetIsStateful(b, kind == Kind::kCollective);
  for (const char* a : attrs) TF_OpDefinitionBuilderAddAttr(b, a);
  for (const char* i : inputs) TF_OpDefinitionBuilderAddInput(b, i);
  for (const char* o : outputs) TF_OpDefinitionBuilderAddOutput(b, o);
  TF_OpDefinitionBuilderSetShapeInferenceFunction(b, shape);
  TF_Status* status = TF_NewStatus();
  TF_RegisterOpDefinition(b, status);
  if (TF_GetCode(status) != TF_OK) {  // a bug in the specs above: nothing could run
    std::fprintf(stderr, "hora: cannot register the TensorFlow op %s: %s\n", name, TF_Message(status));
    std::abort();
  }
  TF_DeleteStatus(status);
}

// The element types of each family: the reductions take hora's numeric types, the collectives
// that only move data take bool and uint16 too (Horovod's move ops take uint16; it is moved as
// int16, whose bits are copied unchanged: horaTypeOf).
constexpr const char* kReduceTypes = "T: {uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64}";
constexpr const char* kMoveTypes =
    "T: {uint8, int8, uint16, int16, int32, int64, float16, bfloat16, float32, float64, bool}";
constexpr const char* kName = "tensor_name: string = ''";
constexpr const char* kScope = "ignore_name_scope: bool = false";
constexpr const char* kSet = "process_set_id: int = 0";

}  // namespace

void defineOps() {
  define(Kind::kCollective, "HoraAllreduce",
         {kReduceTypes, "reduce_op: int", "prescale_factor: float", "postscale_factor: float", kScope, kSet, kName},
         {"tensor: T"}, {"sum: T"}, sameShapes);
  define(Kind::kCollective, "HoraGroupedAllreduce",
         {kReduceTypes, "reduce_op: int", "prescale_factor: float", "postscale_factor: float", kScope,
          "num_tensors: int", kSet, kName},
         {"tensors: num_tensors * T"}, {"sum: num_tensors * T"}, sameShapes);
  define(Kind::kCollective, "HoraAllgather", {kMoveTypes, kScope, kSet, kName}, {"tensor: T"}, {"output: T"}, unknownShapes);
  define(Kind::kCollective, "HoraGroupedAllgather", {kMoveTypes, kScope, "num_tensors: int", kSet, kName}, {"tensors: num_tensors * T"},
         {"outputs: num_tensors * T"}, unknownShapes);
  define(Kind::kCollective, "HoraBroadcast", {kMoveTypes, "root_rank: int", kScope, kSet, kName}, {"tensor: T"}, {"output: T"},
         sameShapes);
  define(Kind::kCollective, "HoraAlltoall", {kMoveTypes, kScope, kSet, kName}, {"tensor: T", "splits: int32"},
         {"output: T", "received_splits: int32"}, unknownShapes);
  define(Kind::kCollective, "HoraReducescatter",
         {kReduceTypes, "reduce_op: int", kScope, "prescale_factor: float", "postscale_factor: float", kSet, kName},
         {"tensor: T"}, {"output: T"}, unknownShapes);
  define(Kind::kCollective, "HoraGroupedReducescatter",
         {kReduceTypes, "reduce_op: int", kScope, "num_tensors: int", "prescale_factor: float",
          "postscale_factor: float", kSet, kName},
         {"tensors: num_tensors * T"}, {"outputs: num_tensors * T"}, unknownShapes);
  define(Kind::kCollective, "HoraJoin", {kSet}, {}, {"last_rank: int32"}, scalar);
  define(Kind::kTopology, "HoraSize", {kSet}, {}, {"size: int32"}, scalar);
  define(Kind::kTopology, "HoraLocalSize", {}, {}, {"local_size: int32"}, scalar);
  define(Kind::kTopology, "HoraRank", {}, {}, {"rank: int32"}, scalar);
  define(Kind::kTopology, "HoraLocalRank", {}, {}, {"local_rank: int32"}, scalar);
  define(Kind::kTopology, "HoraProcessSetIncluded", {kSet}, {}, {"included: int32"}, scalar);
}

}  // namespace hora::tf
