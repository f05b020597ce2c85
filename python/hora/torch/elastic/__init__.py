"""hora.torch.elastic: Horovod's elastic training API (hvd.elastic) on hora (docs/elastic.md).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for batch in ...:
                ...
                state.sampler.record_batch(i, batch_size)
                if step % 10 == 0:
                    state.commit()
            state.sampler.set_epoch(state.epoch + 1)

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    train(state)

run() re-runs the function after a reset: when a collective failed (a worker was lost:
HoraInternalError) the state goes back to its last commit; when the driver announced a host
change (HostsUpdatedInterrupt, raised by commit() on every rank at the same step) it stays as it
is. Either way every rank leaves the old ring (shutdown), joins the next generation (init),
rank 0's state is broadcast to all (sync; skipped when only hosts were removed), and the
function is called again. A worker the driver removed leaves with exit code 0.
"""

import functools
import sys

from hora import _core
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.elastic.state import HostsUpdatedInterrupt, ObjectState, State, TorchState
from hora.torch.mpi_ops import HoraInternalError, init, shutdown


def _reset():
    shutdown()
    try:
        init()
    except _core.WorkerRemovedError as e:
        print(f"hora: {e}; this worker leaves the job", file=sys.stderr, flush=True)
        sys.exit(0)


def run(func):
    """Decorator: runs func(state, *args, **kwargs) on the workers of the current generation,
    again after every reset, until it returns (Horovod's hvd.elastic.run)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HoraInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            _reset()
            state.on_reset()

    return wrapper


__all__ = ["ElasticSampler", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
