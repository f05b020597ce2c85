"""The gradient side of DistributedOptimizer: reducing a list of gradients across a process set
(GradientReducer; LocalAggregator, in hora.tensorflow.gradient_aggregation, sums them over
several backward passes first).

It works on any Keras generation: it takes gradients and variables and returns gradients, and
runs eagerly or inside the train step that Keras traces with tf.function.
"""

import tensorflow as tf

import hora.tensorflow as hvd
from hora._keras.keras_version import variable_key
from hora.common.elastic import is_elastic_job


def split_evenly(items, parts):
    """`items` in `parts` consecutive lists whose lengths differ by at most one (the first ones
    longer): how Horovod spreads gradients over `groups=N` groups."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [part for part in out if part]


class GradientReducer:
    """Reduces gradients across `process_set` with Horovod's DistributedOptimizer semantics:
    - op Average or Sum; with Average, gradient_predivide_factor f scales by 1/f before the sum
      and by f/size after it (splitting the division to keep fp16 sums in range);
    - IndexedSlices (embedding gradients) go through hvd.allreduce's sparse path, or become
      dense first with sparse_as_dense;
    - groups: None (one allreduce per gradient, which the engine fuses as they become ready), a
      number of groups, or lists of variables whose gradients are reduced together;
    - gradients of variables registered as local are not reduced; with scale_local_gradients
      they are divided by the size, so that they are on the scale of the averaged ones.
    """

    def __init__(self, name, compression, sparse_as_dense, op, gradient_predivide_factor, groups, process_set,
                 scale_local_gradients):
        self.name = name
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        if op == hvd.Average:
            self.prescale_factor, self.postscale_factor = 1.0 / gradient_predivide_factor, gradient_predivide_factor
        else:
            self.prescale_factor, self.postscale_factor = 1.0, 1.0
        self.groups = groups
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self.local_vars = set()

    def register_local_var(self, variable):
        self.local_vars.add(variable_key(variable))

    def __call__(self, grads, variables):
        """The reduced gradients, in the order of `grads` (None stays None)."""
        grads = list(grads)
        if self.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        shared = [i for i, (g, v) in enumerate(zip(grads, variables))
                  if g is not None and variable_key(v) not in self.local_vars]
        if self._distributed():
            with tf.name_scope(self.name + "_Allreduce"):
                for indices in self._group_indices(shared, variables):
                    for i, reduced in zip(indices, self._reduce([grads[i] for i in indices])):
                        grads[i] = reduced
        if self.scale_local_gradients and self.local_vars:
            shared = set(shared)
            for i, g in enumerate(grads):
                if g is not None and i not in shared:
                    grads[i] = self._scale_local(g)
        return grads

    def _distributed(self):
        # Horovod skips the reduction when this rank is alone in its set; an elastic job always
        # reduces, because a train step traced at one size keeps running after the job grows.
        return self.process_set.included() and (self.process_set.size() > 1 or is_elastic_job())

    def _group_indices(self, shared, variables):
        if self.groups is None:
            return [[i] for i in shared]
        if isinstance(self.groups, int):
            return split_evenly(shared, self.groups)
        position = {variable_key(variables[i]): i for i in shared}
        grouped = []
        for group in self.groups:
            indices = [position.pop(variable_key(v)) for v in group if variable_key(v) in position]
            if indices:
                grouped.append(indices)
        return grouped + [[i] for i in shared if i in position.values()]

    def _reduce(self, tensors):
        kwargs = dict(compression=self.compression, op=self.op, prescale_factor=self.prescale_factor,
                      postscale_factor=self.postscale_factor, process_set=self.process_set)
        if len(tensors) == 1 and self.groups is None:
            return [hvd.allreduce(tensors[0], **kwargs)]
        return hvd.grouped_allreduce(tensors, **kwargs)

    def _scale_local(self, grad):
        size = tf.cast(hvd.size_op(process_set_id=self.process_set.process_set_id), grad.dtype)
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
        return grad / size
