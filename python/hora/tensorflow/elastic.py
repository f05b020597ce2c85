"""Elastic training with TensorFlow (horovod.tensorflow.elastic): hvd.elastic.run, and the states
of Keras models (TensorFlowKerasState), of variable lists (TensorFlowState) and of Python
objects (ObjectState), on hora.common.elastic's run loop (docs/elastic.md).

A collective that fails because a process was lost raises a TensorFlow error from the op
(UnknownError; AbortedError once the engine has shut down); run turns it into
HoraInternalError, on which the loop restores the last commit, rejoins and syncs."""

import functools

import tensorflow as tf

from hora.common import elastic as _elastic
from hora.common.exceptions import HoraInternalError, HorovodInternalError, WorkerRemovedError  # noqa: F401
from hora.tensorflow.functions import broadcast_object, broadcast_variables
from hora.tensorflow.mpi_ops import init, rank
from hora.tensorflow.util import _executing_eagerly, build_optimizer_slots


def _hora_errors(func):
    """func, with the TensorFlow errors of a lost process raised as hora's exceptions."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (tf.errors.UnknownError, tf.errors.AbortedError) as e:
            raise HoraInternalError(e.message) from e
        except tf.errors.UnavailableError as e:  # the driver removed this worker (engine_link.h)
            raise WorkerRemovedError(e.message) from e

    return wrapper


def run(func):
    """Runs func(state, ...) on the workers of each generation of an elastic job, again after
    every change of workers, until it returns; state (a State) is synced from rank 0 first.
    Collectives must not run in the decorated function's caller, only inside func."""
    return _elastic.run_fn(_hora_errors(func), lambda: _elastic.rejoin(init))


def _optimizer_variables(optimizer):
    variables = optimizer.variables  # a method in Keras 2, a property in Keras 3
    return list(variables() if callable(variables) else variables)


class ObjectState(_elastic.ObjectState):
    """State of Python objects (keyword arguments, kept as attributes), broadcast from rank 0."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)


class TensorFlowKerasState(_elastic.ObjectState):
    """State of a built Keras model and its optimizer (the model's compiled one by default), plus
    the keyword arguments as attributes. Eager (TensorFlow 2) only."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not _executing_eagerly():
            raise NotImplementedError("hora's TensorFlowKerasState needs eager execution (TensorFlow 2)")
        if hasattr(model, "build") and not model.built:
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _variables(self):
        return list(self.model.variables), _optimizer_variables(self.optimizer)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        for current, saved in zip(self._variables(), self._saved):
            for var, value in zip(current, saved):
                var.assign(value)
        super().restore()

    def sync(self):
        build_optimizer_slots(self.optimizer, self.model.trainable_variables)
        model_vars, optimizer_vars = self._variables()
        broadcast_variables(model_vars, root_rank=0)
        if optimizer_vars:
            broadcast_variables(optimizer_vars, root_rank=0)
        self._save_model()
        super().sync()

    def _save_model(self):
        pull = getattr(self.optimizer, "pull_server_state", None)
        if pull is not None:  # ps-async: the optimizer's state is the servers'
            pull()
        self._saved = [[tf.identity(v) for v in variables] for variables in self._variables()]


class TensorFlowState(_elastic.ObjectState):
    """State of a list of tf.Variable (eager), plus the keyword arguments as attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        if not _executing_eagerly() or variables is None:
            raise NotImplementedError("hora's TensorFlowState takes a list of variables, in eager mode")
        self.variables = list(variables)
        self.session = session
        self._save_model()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        for var, value in zip(self.variables, self._values):
            var.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self.variables, root_rank=0)  # Horovod's TF2 path skips this: a bug
        self._save_model()
        super().sync()

    def _save_model(self):
        self._values = [v.numpy() for v in self.variables]


__all__ = ["ObjectState", "TensorFlowKerasState", "TensorFlowState", "run"]
