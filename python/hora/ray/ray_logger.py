"""horovod.ray.ray_logger: ``log(info)`` in a worker's function hands ``info`` to every callback
given to the driver's ``RayExecutor.run``/``execute`` or ``ElasticRayExecutor.run``
(``callbacks=[...]``), in the driver's process, in the order logged, while the job runs.

The items travel through a Ray queue actor made for the run (no CPU of its own); a driver thread
takes them off and calls the callbacks. A callback that raises does not stop the job: the run
raises its exception once the job has ended. ``log`` outside a run with callbacks warns once and
drops the item, as Horovod's does.
"""

import threading
import warnings

_queue = None  # this worker process's queue to the driver, set by the run's function
_warned = False

# How long the driver's thread waits for an item before it looks whether the run ended.
_POLL_S = 0.2


def configure(queue):
    """Sends this process's later ``log`` calls to ``queue`` (done by the run for its workers)."""
    global _queue
    _queue = queue


def log(info_dict):
    """Hands ``info_dict`` (anything picklable) to the driver's callbacks."""
    global _warned
    if _queue is not None:
        _queue.put(info_dict)
    elif not _warned:
        _warned = True
        warnings.warn("hora.ray.ray_logger.log: this run has no callbacks to send the item to; it is dropped")


def run_with_callbacks(callbacks, fn, run):
    """``run(fn')``, where ``fn'`` (taking the executable, as ``fn``) first sends its worker's
    ``log`` calls to a queue whose items the driver hands to each of ``callbacks``; the
    callbacks' first exception is raised after the run."""
    if not callbacks:
        return run(fn)
    pump = _Pump(list(callbacks))
    queue = pump.queue

    def logged(executable):
        configure(queue)
        return fn(executable)

    try:
        result = run(logged)
    finally:
        pump.close()
    if pump.failure is not None:
        raise pump.failure
    return result


class _Pump:
    """The driver's side: a queue actor and the thread that feeds its items to the callbacks."""

    def __init__(self, callbacks):
        from ray.util.queue import Queue
        self.queue = Queue(actor_options={"num_cpus": 0})
        self.callbacks = callbacks
        self.failure = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._feed, name="hora-ray-callbacks", daemon=True)
        self._thread.start()

    def _feed(self):
        from ray.util.queue import Empty
        while True:
            try:
                item = self.queue.get(timeout=_POLL_S)
            except Empty:
                if self._done.is_set():
                    return  # the run ended and every item is taken
                continue
            self._call(item)

    def _call(self, item):
        for callback in self.callbacks:
            try:
                callback(item)
            except Exception as e:  # noqa: BLE001 - raised by the run once the job has ended
                if self.failure is None:
                    self.failure = e

    def close(self):
        self._done.set()
        self._thread.join()
        self.queue.shutdown()
