"""hora's TensorFlow ops and their gradients: the names, arguments and results of
horovod.tensorflow.mpi_ops. The ops are asynchronous kernels of hora's op library (_ops.so,
src/tensorflow), which enqueue into the same engine as every other hora frontend; they work
eagerly and inside tf.function, where the allreduces of one step are fused by the engine.

Negotiation names: inside a graph (tf.function) a collective is named after its node, by default
"Hora<Op>_<input tensor's name>", the same on every rank that traces the same function (as
Horovod). In eager mode TensorFlow names every kernel after its op, so a name given with name=
travels in the op's tensor_name attr; unnamed eager calls of one op share its name, which is
safe because an eager op completes before the next one starts. A mismatch between ranks raises
tf.errors.FailedPreconditionError on every rank, naming the tensor."""

import os
import re

import tensorflow as tf
from tensorflow.python.framework import ops as _tf_ops

from hora.common import basics, native, thread_budget
from hora.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                                gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                                mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                                start_timeline, stop_timeline)
from hora.common.exceptions import HoraInternalError, HorovodInternalError  # noqa: F401
from hora.common.ops import Adasum, Average, Max, Min, Product, Sum, resolve_op  # noqa: F401
from hora.common.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                      process_set_by_id, remove_process_set)
from hora.tensorflow.util import _executing_eagerly

_basics = basics  # Horovod's name for the basics object, which code written for it reaches into


def _load_library():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ops.so")
    if not os.path.exists(path):
        raise ImportError(f"hora.tensorflow: {path} is missing: hora was built without TensorFlow's headers "
                          "(run scripts/setup.sh, which installs TensorFlow before building hora)")
    library = tf.load_op_library(path)
    native.attach(path)
    return library


HORA_LIB = _load_library()

# The collective ops (stateful in op_defs.cc, as they are side effects across processes).
_COLLECTIVES = ("HoraAllreduce", "HoraGroupedAllreduce", "HoraAllgather", "HoraGroupedAllgather", "HoraBroadcast",
                "HoraAlltoall", "HoraReducescatter", "HoraGroupedReducescatter", "HoraJoin")


def _run_collectives_independently():
    """tf.function runs the stateful ops of a function one after the other, in program order,
    which would let the engine see one gradient's allreduce at a time, never fused. The ops that
    TensorFlow's automatic control dependencies name as order-insensitive but must-run get no
    such chain: they run before the function returns, concurrently with everything else. hora's
    collectives are such ops (they order themselves through the engine's negotiation); the list
    is TensorFlow's private set, present in 2.15 and 2.21. Without it (another TensorFlow), the
    collectives still run correctly, in program order."""
    from tensorflow.python.framework import auto_control_deps

    known = getattr(auto_control_deps, "MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS", None)
    if isinstance(known, frozenset):
        auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = known | frozenset(_COLLECTIVES)


_run_collectives_independently()


def init(comm=None, process_sets=None):
    """Joins the job (horarun, mpirun, srun or a plain process: a job of one); as hvd.init."""
    budget = thread_budget.omp_budget()
    if budget:
        _size_pools(budget)
    basics.init(comm, process_sets, compute_threads=_compute_threads())
    if budget is None and basics.local_size() > 1 and _size_pools(thread_budget.host_share(basics.local_size())):
        basics.set_compute_threads(_compute_threads())


# Note [thread budget] (launcher/thread_budget.h) for TensorFlow, which reads no OMP_NUM_THREADS:
# its intra- and inter-op pools each start a thread per core, so that 2 ranks on 2 cores ran up
# to 8 busy threads; the small CNN's model.fit at 2 ranks ran 1.07-1.23x faster with both pools
# at 1 (6 interleaved runs). init sizes them to OMP_NUM_THREADS (which horarun sets for ranks
# that share a host) or, without it (mpirun, srun, Spark, Ray), to the host's cores divided among
# its ranks. Left alone when the script sized either pool, or once TensorFlow's runtime has
# started (its pools are fixed then).
def _size_pools(threads):
    """Both pools to `threads`, unless sized already or fixed; whether it did."""
    pools = tf.config.threading
    if pools.get_intra_op_parallelism_threads() or pools.get_inter_op_parallelism_threads():
        return False
    try:
        pools.set_intra_op_parallelism_threads(threads)
        pools.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # the runtime is up: its pools cannot change any more
        return False
    return True


def _compute_threads():
    """The threads TensorFlow computes with (intra-op; 0 means one per core)."""
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    return threads if threads > 0 else (os.cpu_count() or 1)


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for the deprecated `average=` argument (op defaults to Average)."""
    return resolve_op(op, average)


def check_num_rank_power_of_2(num_rank):
    """Whether num_rank is a power of two (Adasum's requirement)."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def _normalize_name(name):
    """Normalizes an op name to TensorFlow's rules."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _refuse_xla(prefix):
    """hora's kernels are not XLA kernels, so a function compiled whole by XLA
    (tf.function(jit_compile=True), Keras' compile(jit_compile=True)) cannot hold them: say so
    when it is traced, rather than let XLA fail at the first step listing unsupported ops."""
    from tensorflow.python.ops import control_flow_util

    if control_flow_util.GraphOrParentsInXlaContext(_tf_ops.get_default_graph()):
        raise ValueError(f"{prefix}: hora's collectives cannot run inside a function compiled by XLA "
                         "(jit_compile=True); compile the train step with jit_compile=False (Keras: "
                         "model.compile(..., jit_compile=False)) or call the collective outside it")


def _op_name(prefix, tensors, name):
    """(node name, tensor_name attr) of a collective: Horovod's graph names, or the eager name."""
    if _executing_eagerly():
        return None, name or ""
    _refuse_xla(prefix)
    if name is None:
        first, last = tensors[0], tensors[-1]
        name = prefix + "_" + (first.name if first is last else first.name + "_" + last.name)
        name = _normalize_name(name)
    return name, ""


def _set_first_dimension_unknown(outputs, inputs):
    """Outputs whose first dimension negotiation decides keep the rest of their input's shape."""
    for out, x in zip(outputs, inputs):
        if x.shape.rank is not None and x.shape.rank > 0:
            out.set_shape(tf.TensorShape([None]).concatenate(x.shape[1:]))
        elif x.shape.rank is not None:
            out.set_shape(tf.TensorShape([None]))
    return outputs


# --- allreduce -------------------------------------------------------------------------------

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0, ignore_name_scope=False,
               process_set=global_process_set):
    """An op reducing `tensor` over the processes of `process_set` (Sum by default); the shape
    and type must agree on every rank for a given name."""
    node, tensor_name = _op_name("HoraAllreduce", [tensor], name)
    return HORA_LIB.hora_allreduce(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                   process_set_id=process_set.process_set_id, tensor_name=tensor_name, name=node)


@_tf_ops.RegisterGradient("HoraAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce of the gradient, with the same op and scales."""
    return _allreduce(grad, op=op.get_attr("reduce_op"), prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      ignore_name_scope=op.get_attr("ignore_name_scope"),
                      process_set=process_set_by_id(op.get_attr("process_set_id")))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """One op reducing every tensor of `tensors` (of one type), each with its own name."""
    node, tensor_name = _op_name("HoraGroupedAllreduce", tensors, name)
    return HORA_LIB.hora_grouped_allreduce(tensors, reduce_op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, ignore_name_scope=ignore_name_scope,
                                           process_set_id=process_set.process_set_id, tensor_name=tensor_name,
                                           name=node)


@_tf_ops.RegisterGradient("HoraGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=op.get_attr("reduce_op"),
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"),
                              ignore_name_scope=op.get_attr("ignore_name_scope"),
                              process_set=process_set_by_id(op.get_attr("process_set_id")))


# --- allgather -------------------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates `tensor` of every process of the set on dimension 0, in rank order; the first
    dimension may differ between ranks, the others must agree."""
    node, tensor_name = _op_name("HoraAllgather", [tensor], name)
    out = HORA_LIB.hora_allgather(tensor, ignore_name_scope=ignore_name_scope,
                                  process_set_id=process_set.process_set_id, tensor_name=tensor_name, name=node)
    return _set_first_dimension_unknown([out], [tensor])[0]


def _split_of_this_rank(grad, x, ignore_name_scope, process_set):
    """This rank's rows of an allgathered gradient: the Average allreduce of the gradient, split
    by every rank's first dimension (allgathered too)."""
    grad = _allreduce(grad, op=Average, ignore_name_scope=ignore_name_scope, process_set=process_set)
    with tf.device("/cpu:0"):
        rows = tf.reshape(tf.shape(x, out_type=tf.int32)[0], [1])
        rows = tf.reshape(allgather(rows, ignore_name_scope=ignore_name_scope, process_set=process_set),
                          [process_set.size()])
    return tf.split(grad, num_or_size_splits=rows, axis=0)[process_set.rank()]


@_tf_ops.RegisterGradient("HoraAllgather")
def _allgather_grad(op, grad):
    return _split_of_this_rank(grad, op.inputs[0], op.get_attr("ignore_name_scope"),
                               process_set_by_id(op.get_attr("process_set_id")))


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """allgather of every tensor of `tensors` (of one type) in one op."""
    node, tensor_name = _op_name("HoraGroupedAllgather", tensors, name)
    outs = HORA_LIB.hora_grouped_allgather(tensors, ignore_name_scope=ignore_name_scope,
                                           process_set_id=process_set.process_set_id, tensor_name=tensor_name,
                                           name=node)
    return _set_first_dimension_unknown(list(outs), tensors)


@_tf_ops.RegisterGradient("HoraGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    # One allreduce per gradient, not a grouped one: TensorFlow may hand float32 zeros for an
    # unused float64 output, and a grouped op takes one type.
    process_set = process_set_by_id(op.get_attr("process_set_id"))
    return [_split_of_this_rank(g, x, op.get_attr("ignore_name_scope"), process_set)
            for g, x in zip(grads, op.inputs)]


# --- broadcast -------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """`tensor` of the process `root_rank` (a global rank) on every process of the set."""
    node, tensor_name = _op_name("HoraBroadcast", [tensor], name)
    return HORA_LIB.hora_broadcast(tensor, root_rank=root_rank, ignore_name_scope=ignore_name_scope,
                                   process_set_id=process_set.process_set_id, tensor_name=tensor_name, name=node)


@_tf_ops.RegisterGradient("HoraBroadcast")
def _broadcast_grad(op, grad):
    """Horovod's gradient: only the root's input reaches the outputs, so the root gets the
    Average allreduce of the outputs' gradients and the other ranks zeros."""
    root_rank = op.get_attr("root_rank")
    grad_reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr("ignore_name_scope"),
                              process_set=process_set_by_id(op.get_attr("process_set_id")))
    return grad_reduced if rank() == root_rank else grad_reduced * 0


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast of variables: each variable takes the root's value; returns
    the new values. (hora assigns the broadcast values, which Horovod's inplace=False does too.)"""
    values = [broadcast(v, root_rank, name=None if name is None else f"{name}.{i}", process_set=process_set)
              for i, v in enumerate(variables)]
    return [v.assign(x) for v, x in zip(variables, values)]


# --- alltoall --------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends splits[d] rows of dimension 0 (an even split when None) to each process d of the
    set, and returns the rows received, in rank order; with splits given, also how many rows
    came from each process (received_splits), as Horovod."""
    splits_ = tf.convert_to_tensor(splits, dtype=tf.int32) if splits is not None else tf.constant([], tf.int32)
    node, tensor_name = _op_name("HoraAlltoall", [tensor], name)
    output, received = HORA_LIB.hora_alltoall(tensor, splits=splits_, ignore_name_scope=ignore_name_scope,
                                              process_set_id=process_set.process_set_id, tensor_name=tensor_name,
                                              name=node)
    _set_first_dimension_unknown([output], [tensor])
    if process_set.size() is not None:
        received.set_shape([process_set.size()])
    return (output, received) if splits is not None else output


@_tf_ops.RegisterGradient("HoraAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    """The rows' gradients go back where the rows came from; rows beyond the splits' sum were not
    sent and get zeros."""
    x = op.inputs[0]
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1], ignore_name_scope=op.get_attr("ignore_name_scope"),
                       process_set=process_set_by_id(op.get_attr("process_set_id")))
    missing = tf.shape(x)[0] - tf.shape(grad)[0]
    padding = tf.concat([[[0, missing]], tf.zeros([tf.rank(x) - 1, 2], tf.int32)], axis=0)
    return [tf.pad(grad, padding), None]


# --- reducescatter ---------------------------------------------------------------------------

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and gives each process its block of dimension 0 (the first
    dimension's rows, split as evenly as possible, the first ranks taking one more)."""
    node, tensor_name = _op_name("HoraReducescatter", [tensor], name)
    out = HORA_LIB.hora_reducescatter(tensor, reduce_op=op, ignore_name_scope=ignore_name_scope,
                                      process_set_id=process_set.process_set_id, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, tensor_name=tensor_name, name=node)
    return _set_first_dimension_unknown([out], [tensor])[0]


def _reducescatter_grad_of(grad, op, process_set):
    """An allgather of the gradient, scaled as the forward op scaled (Sum counts every rank)."""
    if op.get_attr("reduce_op") == Sum:
        grad *= process_set.size()
    grad *= op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    return allgather(grad, ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=process_set)


@_tf_ops.RegisterGradient("HoraReducescatter")
def _reducescatter_grad(op, grad):
    return _reducescatter_grad_of(grad, op, process_set_by_id(op.get_attr("process_set_id")))


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    node, tensor_name = _op_name("HoraGroupedReducescatter", tensors, name)
    outs = HORA_LIB.hora_grouped_reducescatter(tensors, reduce_op=op, ignore_name_scope=ignore_name_scope,
                                               process_set_id=process_set.process_set_id,
                                               prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                               tensor_name=tensor_name, name=node)
    return _set_first_dimension_unknown(list(outs), tensors)


@_tf_ops.RegisterGradient("HoraGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    process_set = process_set_by_id(op.get_attr("process_set_id"))
    return [_reducescatter_grad_of(g, op, process_set) for g in grads]


# --- join and the topology ops ---------------------------------------------------------------

def join():
    """This rank has no more data: until every rank has joined, the others' allreduces go on with
    zeros from it. Returns (an int32 scalar) the last rank to join."""
    return HORA_LIB.hora_join()


def size_op(process_set_id=0, name=None):
    """The number of processes (of the set), read when the graph runs rather than traced."""
    return HORA_LIB.hora_size(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    """The number of processes on this host, read when the graph runs."""
    return HORA_LIB.hora_local_size(name=name)


def rank_op(name=None):
    """This process's rank, read when the graph runs."""
    return HORA_LIB.hora_rank(name=name)


def local_rank_op(name=None):
    """This process's rank on its host, read when the graph runs."""
    return HORA_LIB.hora_local_rank(name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process is in the set, 0 when not, or Horovod's error codes: -1 when hora is
    not initialized, -2 for an unknown set."""
    return HORA_LIB.hora_process_set_included(process_set_id=process_set_id, name=name)


for _op in ("HoraJoin", "HoraSize", "HoraLocalSize", "HoraRank", "HoraLocalRank", "HoraProcessSetIncluded"):
    _tf_ops.NotDifferentiable(_op)
