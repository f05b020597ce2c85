"""Broadcasting variables and Python objects, and gathering objects (horovod.tensorflow.functions)."""

import io

import cloudpickle
import tensorflow as tf

from hora.common.process_sets import global_process_set
from hora.tensorflow.mpi_ops import allgather, broadcast, broadcast_, rank
from hora.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, _tf_variable


@_cache
def _make_broadcast_group_fn():
    if _executing_eagerly():
        # One tf.function: the broadcasts run concurrently and are negotiated together.
        def broadcast_group(variables, root_rank, process_set):
            for var in variables:
                var.assign(broadcast(var, root_rank, process_set=process_set))

        return _make_subgraph(broadcast_group)

    def broadcast_group(variables, root_rank, process_set):  # a graph needs one op to run
        return tf.group(*[var.assign(broadcast(var, root_rank, process_set=process_set)) for var in variables])

    return broadcast_group


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Gives every variable of every process of the set the value it has on `root_rank`.
    inplace: Horovod's in-place broadcast (hora assigns the broadcast values either way)."""
    variables = [_tf_variable(v) for v in variables]  # Keras 3's become tensors in a tf.function
    if inplace:
        return broadcast_(variables, root_rank, process_set=process_set)
    return _make_broadcast_group_fn()(variables, root_rank, process_set)


def _to_numpy(value, session):
    if _executing_eagerly():
        return value.numpy()
    return (session or tf.compat.v1.get_default_session()).run(value)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """`obj` of `root_rank`, serialized with cloudpickle, on every process of the set."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        buffer = io.BytesIO()
        cloudpickle.dump(obj, buffer)
        data = tf.convert_to_tensor(bytearray(buffer.getvalue()), dtype=tf.uint8)
        _to_numpy(broadcast(tf.constant([data.shape[0]], tf.int32), root_rank, name + ".sz",
                            process_set=process_set), session)
    else:
        length = _to_numpy(broadcast(tf.constant([0], tf.int32), root_rank, name + ".sz", process_set=process_set),
                           session)
        data = tf.zeros([int(length[0])], dtype=tf.uint8)
    data = _to_numpy(broadcast(data, root_rank, name + ".t", process_set=process_set), session)
    if rank() != root_rank:
        obj = cloudpickle.load(io.BytesIO(data.tobytes()))
    return obj


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """TF1 graphs: a function obj -> root_rank's obj, whose broadcasts are built once here (on
    placeholders) and run in `session` (the default one) at each call."""
    name = name or "broadcast_object_fn"
    v1 = tf.compat.v1
    size_in = v1.placeholder(tf.int32, [1], name="bcast_object_size")
    size_out = broadcast(size_in, root_rank, name + ".sz", process_set=process_set)
    data_in = v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    data_out = broadcast(data_in, root_rank, name + ".t", process_set=process_set)
    session = session or v1.get_default_session()

    def bcast(obj):
        if rank() == root_rank:
            buffer = io.BytesIO()
            cloudpickle.dump(obj, buffer)
            data = bytearray(buffer.getvalue())
            session.run(size_out, feed_dict={size_in: [len(data)]})
        else:
            length = session.run(size_out, feed_dict={size_in: [0]})
            data = bytearray(int(length[0]))
        data = session.run(data_out, feed_dict={data_in: list(data)})
        return obj if rank() == root_rank else cloudpickle.load(io.BytesIO(data.tobytes()))

    return bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every process's `obj` (serialized with cloudpickle), in rank order."""
    name = name or type(obj).__name__
    buffer = io.BytesIO()
    cloudpickle.dump(obj, buffer)
    data = tf.convert_to_tensor(bytearray(buffer.getvalue()), dtype=tf.uint8)
    sizes = _to_numpy(allgather(tf.constant([data.shape[0]], tf.int32), name=name + ".sz", process_set=process_set),
                      session)
    gathered = _to_numpy(allgather(data, name=name + ".t", process_set=process_set), session)
    objects, start = [], 0
    for length in sizes:
        objects.append(cloudpickle.load(io.BytesIO(gathered[start:start + length].tobytes())))
        start += length
    return objects
