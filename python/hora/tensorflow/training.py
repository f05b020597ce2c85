"""Averaging gradients across the processes (horovod.tensorflow's training API):
DistributedGradientTape, PartialDistributedGradientTape and DistributedOptimizer, on one
function that reduces a list of gradients (_make_allreduce_grads_fn). In eager mode that
function is compiled with tf.function, so the gradients' allreduces are enqueued together and
the engine fuses them."""

import importlib
import warnings

import tensorflow as tf

from hora.common.elastic import is_elastic_job
from hora.common.process_sets import global_process_set
from hora.tensorflow.collectives import allreduce, grouped_allreduce
from hora.tensorflow.compression import Compression
from hora.tensorflow.gradient_aggregation import LocalAggregator
from hora.tensorflow.mpi_ops import Adasum, Average, process_set_included_op, size_op
from hora.tensorflow.util import _cache, _executing_eagerly, _key, _make_subgraph, refs_to_vars, vars_to_refs


def _reduce_cond(reduce, identity, process_set):
    """reduce() where the set has this process and more than one member, else identity() (read
    when the graph runs in an elastic job, whose sets change under a traced function)."""
    with tf.device("cpu"):
        if is_elastic_job():
            cond = tf.logical_and(tf.equal(process_set_included_op(process_set.process_set_id), 1),
                                  tf.greater(size_op(process_set.process_set_id), 1))
        else:
            cond = tf.convert_to_tensor(bool(process_set.included()) and process_set.size() > 1)
    return tf.cond(cond, reduce, identity)


def _allreduce_cond(tensor, *args, process_set=global_process_set, **kwargs):
    return _reduce_cond(lambda: allreduce(tensor, *args, process_set=process_set, **kwargs), lambda: tensor,
                        process_set)


def _grouped_allreduce_cond(tensors, *args, process_set=global_process_set, **kwargs):
    return _reduce_cond(lambda: grouped_allreduce(tensors, *args, process_set=process_set, **kwargs),
                        lambda: tensors, process_set)


def _split_list(items, parts):
    """items in `parts` consecutive lists of near-equal length."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return [o for o in out if o]


def _groups_of(grads, variables, groups):
    """[(indices, grads)] of each group: explicit lists of variables (the rest one group each),
    or `groups` near-equal consecutive groups."""
    if isinstance(groups, list):
        by_key = {_key(v): (i, g) for i, (v, g) in enumerate(zip(variables, grads)) if g is not None}
        split = []
        for group in groups:
            split.append([by_key.pop(_key(v)) for v in group if _key(v) in by_key])
        split.extend([pair] for pair in by_key.values())
    else:
        split = _split_list([(i, g) for i, g in enumerate(grads) if g is not None], groups)
    return [tuple(zip(*group)) for group in split if group]


@_cache
def _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                    gradient_predivide_factor, groups, process_set):
    groups = refs_to_vars(groups) if isinstance(groups, tuple) else groups
    # Average splits its division around the sum: 1/predivide before, predivide/size after.
    prescale, postscale = (1.0 / gradient_predivide_factor, gradient_predivide_factor) if op == Average else (1.0,
                                                                                                              1.0)
    options = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression, op=op,
                   prescale_factor=prescale, postscale_factor=postscale, process_set=process_set)

    def allreduce_grads(grads, variables=None, use_generic_names=False):
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            if groups is not None:
                reduced = [None] * len(grads)
                for n, (indices, group) in enumerate(_groups_of(grads, variables, groups)):
                    outs = _grouped_allreduce_cond(list(group), name=f"grad_{n}" if use_generic_names else None,
                                                   ignore_name_scope=use_generic_names, **options)
                    for i, out in zip(indices, outs):
                        reduced[i] = out
                return reduced
            return [_allreduce_cond(g, name=f"grad_{i}" if use_generic_names else None,
                                    ignore_name_scope=use_generic_names, **options) if g is not None else None
                    for i, g in enumerate(grads)]

    return _make_subgraph(allreduce_grads) if _executing_eagerly() else allreduce_grads


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set):
    """fn(grads, variables=None, use_generic_names=False) -> the grads reduced across the set
    (None stays None), made once per argument set; compiled with tf.function when eager."""
    groups = vars_to_refs(groups) if isinstance(groups, list) else groups
    return _make_cached_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                           gradient_predivide_factor, groups, process_set)


def _check_training_args(op, gradient_predivide_factor, num_groups, groups):
    """Horovod's checks; returns the groups to use (num_groups is the deprecated spelling)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of tf.Variable.")
    return groups


def _scale_local(grad, process_set):
    """A local source's gradient divided by the set's size (Horovod's scale_local_gradients)."""
    n = float(process_set.size())
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / n, grad.indices, grad.dense_shape)
    return grad / n


class _DistributedGradientTape(tf.GradientTape):
    """The methods DistributedGradientTape adds to the class of the tape it wraps."""

    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False, watch_accessed_variables=True,
                 process_set=global_process_set, scale_local_gradients=True):
        super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        self._tape = tape
        self._allreduce_grads = _make_allreduce_grads_fn("DistributedGradientTape", device_dense, device_sparse,
                                                         compression, sparse_as_dense, op,
                                                         gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Keeps `source`'s gradient local: it is not reduced (only scaled, see
        scale_local_gradients)."""
        self._local_sources.add(_key(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        gradients = super(self.__class__, self).gradient(target, sources, output_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(gradients, expand_composites=False)
        shared = [i for i, s in enumerate(flat_sources) if _key(s) not in self._local_sources]
        reduced = self._allreduce_grads([flat_grads[i] for i in shared], [flat_sources[i] for i in shared],
                                        use_generic_names)
        out = list(flat_grads)
        for i, g in zip(shared, reduced):
            out[i] = g
        if self.scale_local_gradients and self._local_sources:
            for i, s in enumerate(flat_sources):
                if _key(s) in self._local_sources and out[i] is not None:
                    out[i] = _scale_local(out[i], self.process_set)
        return tf.nest.pack_sequence_as(sources, out)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """([(source, grad)] of the local sources, [(source, grad)] of the others)."""
        gradients = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, gradients):
            (local if _key(s) in self._local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """A tape like `gradtape` (an instance of a subclass of its class) whose gradient() averages
    the gradients across the processes of the set.

    compression: Compression.none or Compression.fp16 for the allreduces. sparse_as_dense: turn
    IndexedSlices into dense tensors first. op: the reduction (Average). gradient_predivide_factor:
    with Average, divide by it before the sum and by size/it after. groups: an int (that many
    grouped allreduces) or lists of variables reduced together. process_set: the processes to
    average over. scale_local_gradients: divide the gradients of registered local sources by the
    size."""
    groups = _check_training_args(op, gradient_predivide_factor, num_groups, groups)
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,), dict(_DistributedGradientTape.__dict__))
    return cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
               gradient_predivide_factor, groups, gradtape._persistent, gradtape._watch_accessed_variables,
               process_set=process_set, scale_local_gradients=scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers` (Keras layers) keep their gradients local."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, tf.keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


_LegacyOptimizer = getattr(getattr(getattr(tf.compat, "v1", None), "train", None), "Optimizer", None)


if _LegacyOptimizer is not None:
    class _WrappingOptimizer(_LegacyOptimizer):
        """A TF1 optimizer around another (self._optimizer), whose slots and variables it reports."""

        def get_slot(self, *args, **kwargs):
            return self._optimizer.get_slot(*args, **kwargs)

        def get_slot_names(self, *args, **kwargs):
            return self._optimizer.get_slot_names(*args, **kwargs)

        def variables(self, *args, **kwargs):
            return self._optimizer.variables(*args, **kwargs)


    class _DistributedOptimizer(_WrappingOptimizer):
        """A TF1 optimizer whose compute_gradients() averages the gradients across the set."""

        def __init__(self, optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                     compression=Compression.none, sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                     groups=None, process_set=global_process_set, scale_local_gradients=True,
                     backward_passes_per_step=1, average_aggregated_gradients=False):
            name = name or f"Distributed{type(optimizer).__name__}"
            super().__init__(name=name, use_locking=use_locking)
            self._optimizer = optimizer
            self._allreduce_grads = _make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                                             sparse_as_dense, op, gradient_predivide_factor, groups,
                                                             process_set)
            self._local_vars = set()
            self.process_set = process_set
            self.scale_local_gradients = scale_local_gradients
            self._aggregator = None
            if backward_passes_per_step > 1:
                self._aggregator = LocalAggregator(backward_passes_per_step, average_aggregated_gradients,
                                                   self._reduce, sparse_as_dense)

        def register_local_var(self, var):
            """Keeps `var`'s gradient local (not reduced)."""
            self._local_vars.add(_key(var))

        def compute_gradients(self, *args, **kwargs):
            """The wrapped optimizer's gradients, averaged across the set (with
            backward_passes_per_step > 1: summed locally, and averaged on every N-th pass)."""
            grads, variables = zip(*self._optimizer.compute_gradients(*args, **kwargs))
            reduce = self._aggregator.gradients if self._aggregator is not None else self._reduce
            return list(zip(reduce(grads, variables), variables))

        def _reduce(self, grads, variables):
            shared = [i for i, v in enumerate(variables) if _key(v) not in self._local_vars]
            reduced = self._allreduce_grads([grads[i] for i in shared], [variables[i] for i in shared])
            out = list(grads)
            for i, g in zip(shared, reduced):
                out[i] = g
            if self.scale_local_gradients and self._local_vars:
                out = [_scale_local(g, self.process_set) if _key(v) in self._local_vars and g is not None else g
                       for g, v in zip(out, variables)]
            return out

        def apply_gradients(self, grads_and_vars, global_step=None, name=None):
            """The wrapped optimizer's update; with backward_passes_per_step > 1 only on the
            passes that reduced, the others only counting global_step (as Horovod does)."""
            if self._aggregator is None:
                return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
            grads_and_vars = list(grads_and_vars)  # a zip is read by both branches
            return self._aggregator.apply(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step, name),
                lambda: None if global_step is None else global_step.assign_add(1, read_value=False),
                after=[g for g, _ in grads_and_vars])


    class _DistributedAdasumOptimizer(_WrappingOptimizer):
        """A TF1 optimizer that applies its own gradients locally and combines the resulting
        model deltas across ranks with Adasum: every backward_passes_per_step passes, each
        variable becomes start + Adasum(variable - start), and start that value (start being
        the variable after the previous combination)."""

        def __init__(self, optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                     compression=Compression.none, backward_passes_per_step=1):
            super().__init__(name=name or f"DistributedDelta{type(optimizer).__name__}", use_locking=use_locking)
            self._optimizer = optimizer
            self._compression = compression
            self._passes = backward_passes_per_step
            self._steps = None
            self._starts = {}

        def compute_gradients(self, *args, **kwargs):
            """The wrapped optimizer's local gradients: Adasum combines the updates instead."""
            return self._optimizer.compute_gradients(*args, **kwargs)

        def _state_for(self, variables):
            with tf.init_scope():  # out of any tf.function or control flow, made once
                if self._steps is None:
                    self._steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="adasum_steps")
                for v in variables:
                    if _key(v) not in self._starts:
                        self._starts[_key(v)] = tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                                            name="delta_start")
            return [self._starts[_key(v)] for v in variables]

        def apply_gradients(self, grads_and_vars, global_step=None, name=None):
            grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
            variables = [v for _, v in grads_and_vars]
            starts = self._state_for(variables)
            steps = self._steps.read_value()
            first = tf.cond(tf.equal(steps, 0),
                            lambda: tf.group(*[s.assign(v) for s, v in zip(starts, variables)]), tf.no_op)
            with tf.control_dependencies([first]):
                update = self._optimizer.apply_gradients(grads_and_vars, global_step, name)

            def combine():
                deltas = [v - s for v, s in zip(variables, starts)]
                combined = grouped_allreduce(deltas, op=Adasum, compression=self._compression,
                                             name=f"{self.get_name()}_Adasum")
                news = [s.assign_add(d) for s, d in zip(starts, combined)]
                return tf.group(*[v.assign(n) for v, n in zip(variables, news)])

            with tf.control_dependencies([update]):
                combined = tf.cond(tf.equal((steps + 1) % self._passes, 0), combine, tf.no_op)
            with tf.control_dependencies([combined]):
                return tf.group(self._steps.assign_add(1, read_value=False))


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """An optimizer that averages gradients across the processes before applying them. A Keras
    optimizer (TensorFlow 2) goes to hora.tensorflow.keras.DistributedOptimizer; a TF1
    tf.compat.v1.train.Optimizer is wrapped here. Arguments as DistributedGradientTape's, plus
    backward_passes_per_step (backward passes summed locally per allreduce and update) and
    average_aggregated_gradients (divide those sums by backward_passes_per_step)."""
    groups = _check_training_args(op, gradient_predivide_factor, num_groups, groups)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if _LegacyOptimizer is not None and isinstance(optimizer, _LegacyOptimizer):
        if op == Adasum:
            return _DistributedAdasumOptimizer(optimizer, name, use_locking, device_dense, device_sparse, compression,
                                               backward_passes_per_step)
        return _DistributedOptimizer(optimizer, name, use_locking, device_dense, device_sparse, compression,
                                     sparse_as_dense, op, gradient_predivide_factor, groups, process_set,
                                     scale_local_gradients, backward_passes_per_step, average_aggregated_gradients)
    if op == Adasum:
        raise ValueError("op == Adasum is not supported yet with Keras")
    # Looked up when called: hora.tensorflow.keras is built on this package and imports it.
    hora_keras = importlib.import_module("hora.tensorflow.keras")
    # op and groups go along too (Horovod drops them here, so its op=Sum averages all the same).
    return hora_keras.DistributedOptimizer(optimizer=optimizer, name=name, device_dense=device_dense,
                                           device_sparse=device_sparse, compression=compression,
                                           sparse_as_dense=sparse_as_dense, op=op, groups=groups,
                                           gradient_predivide_factor=gradient_predivide_factor,
                                           backward_passes_per_step=backward_passes_per_step,
                                           average_aggregated_gradients=average_aggregated_gradients,
                                           process_set=process_set, scale_local_gradients=scale_local_gradients)
