"""The cost of one tiny collective inside a tf.function, for the ways a TensorFlow frontend can
reach hora's engine (docs/architecture.md, "TensorFlow ops"):

  empty       a tf.function that only adds 1: TensorFlow's own cost per call, the floor
  c_api       hora's op library (asynchronous kernels on TensorFlow's C API)
  cxx_op      an allreduce kernel on TensorFlow's C++ API, built against this TensorFlow by
              build_cxx_op.sh (given with --cxx-op), enqueueing through the same engine table
  py_function tf.py_function calling hora._core's enqueue and waiting for the handle
  torch       hora.torch.allreduce of a one-element tensor (when torch imports), for reference

and the same with K allreduces in one call (`xK`): the op library's run concurrently and are
fused by the engine; py_function's hold an inter-op thread each while they wait.

  horarun -np 2 .venv/bin/python benchmarks/tensorflow/op_cost.py [--calls 2000] [--repeats 3]
      [--cxx-op $(benchmarks/tensorflow/build_cxx_op.sh)]

Every rank prints its own lines; rank 0's are the table (microseconds per call, each repeat)."""

import argparse
import time

import numpy as np
import tensorflow as tf

import hora.tensorflow as hvd
from hora import _core
from hora.common import native


def per_call_us(fn, calls):
    for _ in range(max(calls // 10, 20)):  # warm-up: tracing, negotiation, the response cache
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def py_function_allreduce(x, name):
    """Candidate: the collective as a Python function that TensorFlow calls from its graph."""

    def reduce(t):
        source = t.numpy()
        out = np.empty_like(source)
        handle = _core.enqueue(name, _core.ALLREDUCE, _core.DATA_TYPES["float32"], list(source.shape),
                               source.ctypes.data, out.ctypes.data, _core.REDUCE_OPS["Sum"])
        handle.wait(60.0)
        return out

    y = tf.py_function(reduce, [x], Tout=tf.float32)
    y.set_shape(x.shape)
    return y


def load_cxx_op(path):
    """The C++ candidate's allreduce, attached to the engine and run as hora's ops are in a
    tf.function (stateful, order-insensitive: see hora.tensorflow.mpi_ops)."""
    from tensorflow.python.framework import auto_control_deps

    library = tf.load_op_library(path)
    native.attach(path)
    auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS |= {"HoraCxxAllreduce"}
    return library.hora_cxx_allreduce


def candidates(k, cxx_allreduce):
    x = tf.constant([1.0])

    @tf.function
    def empty():
        return [x + i for i in range(k)]

    @tf.function
    def c_api():
        return [hvd.allreduce(x + i, op=hvd.Sum, name=f"c_api.{k}.{i}") for i in range(k)]

    @tf.function
    def py_function():
        return [py_function_allreduce(x + i, f"py.{k}.{i}") for i in range(k)]

    found = {"empty": empty, "c_api": c_api, "py_function": py_function}
    if cxx_allreduce is not None:
        found["cxx_op"] = tf.function(lambda: [cxx_allreduce(x + i, name=f"cxx.{k}.{i}") for i in range(k)])
    try:
        import torch

        import hora.torch as hvd_torch

        t = torch.ones(1)
        found["torch"] = lambda: [hvd_torch.allreduce(t, op=hvd_torch.Sum, name=f"torch.{k}.{i}") for i in range(k)]
    except ImportError:
        pass
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fused", type=int, default=8, help="allreduces per call in the xK rows")
    parser.add_argument("--cxx-op", help="the library build_cxx_op.sh built (adds the cxx_op rows)")
    args = parser.parse_args()
    hvd.init()
    cxx_allreduce = load_cxx_op(args.cxx_op) if args.cxx_op else None
    rows = {}
    for repeat in range(args.repeats):  # interleaved: every candidate once per repeat
        for k in (1, args.fused):
            for label, fn in candidates(k, cxx_allreduce).items():
                rows.setdefault(f"{label} x{k}", []).append(per_call_us(fn, args.calls // k))
    if hvd.rank() == 0:
        print(f"TensorFlow {tf.__version__}, {hvd.size()} rank(s), microseconds per call ({args.repeats} repeats)")
        for label, values in rows.items():
            print(f"  {label:16s} " + "  ".join(f"{v:8.1f}" for v in values))
    hvd.shutdown()


if __name__ == "__main__":
    main()
