"""backward_passes_per_step: summing gradients locally over several backward passes and reducing
the sums across ranks only on the last one (LocalAggregator). Shared by the Keras optimizers
(hora._keras.optimizer) and hora.tensorflow's TF1 optimizer; it runs eagerly, inside a
tf.function, and in a TF1 graph, where stateful ops run in no implied order, so every order it
needs is an explicit control dependency.
"""

import tensorflow as tf


class LocalAggregator:
    """backward_passes_per_step: sums each gradient locally over N backward passes, reduces the
    sums across ranks on the N-th pass only, and lets the optimizer apply them then; on the other
    passes the optimizer only counts the iteration. With average_aggregated_gradients the sums
    are divided by N. Its accumulators are tf.Variables kept out of the optimizer's tracked
    state, so a saved model has exactly the wrapped optimizer's variables."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients, reducer, sparse_as_dense):
        if backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self.passes = backward_passes_per_step
        self.average = average_aggregated_gradients
        self.reducer = reducer  # (gradients, variables) -> the gradients reduced across ranks
        self.sparse_as_dense = sparse_as_dense
        self.counter = None
        self.sums = None

    def _create(self, grads, variables):
        # Lifted out of the traced train step, as Keras creates optimizer slots: a variable made
        # inside a tf.function would belong to that one trace.
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="backward_passes")
            self.sums = [None if g is None else
                         tf.Variable(tf.zeros(tuple(v.shape), dtype=g.dtype), trainable=False,
                                     name="aggregated_gradient")
                         for g, v in zip(grads, variables)]

    def gradients(self, grads, variables):
        """Adds this pass's gradients to the sums; returns the reduced sums on the N-th pass (and
        clears them), the running local sums on the others."""
        grads = list(grads)
        for g in grads:
            if isinstance(g, tf.IndexedSlices) and not self.sparse_as_dense:
                raise ValueError("IndexedSlices are not supported when backward_passes_per_step > 1 "
                                 "and sparse_as_dense is False")
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if self.sums is None:
            self._create(grads, variables)
        present = [i for i, s in enumerate(self.sums) if s is not None]
        added = [self.sums[i].assign_add(grads[i]) for i in present] + [self.counter.assign_add(1)]

        def reduce_and_clear():
            summed = [self.sums[i].read_value() for i in present]
            reduced = self.reducer(summed, [variables[i] for i in present])
            if self.average:
                reduced = [g / self.passes for g in reduced]
            with tf.control_dependencies(reduced):
                cleared = self._clear(present)
            with tf.control_dependencies(cleared):  # (in a TF1 graph, an op nothing needs never runs)
                return [tf.identity(g) for g in reduced]

        def running_sums():
            return [self.sums[i].read_value() for i in present]

        with tf.control_dependencies(added):
            out = tf.cond(tf.equal(self.counter.read_value(), self.passes), reduce_and_clear, running_sums)
        result = [None] * len(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def _clear(self, present):
        return [self.counter.assign(0)] + [self.sums[i].assign(tf.zeros_like(self.sums[i])) for i in present]

    def apply(self, apply_fn, skip_fn, after=()):
        """Runs apply_fn on the pass that reduced (the counter went back to 0), skip_fn on the
        others, after the tensors or ops `after` (the gradients); returns the op of the pass.
        Each may return anything: what is an op or a tensor is waited for (the TF1 optimizer's
        update op), the rest ignored (Keras 2 and 3 optimizers return different things)."""
        def run(fn):
            def branch():
                result = fn()
                return tf.group(result) if isinstance(result, (tf.Operation, tf.Tensor)) else tf.no_op()
            return branch
        with tf.control_dependencies([x for x in after if x is not None]):
            return tf.cond(tf.equal(self.counter.read_value(), 0), run(apply_fn), run(skip_fn))
