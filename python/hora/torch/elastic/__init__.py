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

run() re-runs the function after a reset (hora.common.elastic.run_fn): when a collective failed
(a worker was lost: HoraInternalError) the state goes back to its last commit; when the driver
announced a host change (HostsUpdatedInterrupt, raised by commit() on every rank at the same
step) it stays as it is. Either way every rank leaves the old ring (shutdown), joins the next
generation (init), rank 0's state is broadcast to all (sync; skipped when only hosts were
removed), and the function is called again. A worker the driver removed leaves with exit code 0.
"""

from hora.common.elastic import rejoin, run_fn
from hora.common.exceptions import HoraInternalError, HostsUpdatedInterrupt  # noqa: F401  (importable from here)
from hora.torch.basics import init, shutdown  # noqa: F401  (shutdown: importable from here, as it was)
from hora.torch.elastic.sampler import ElasticSampler
from hora.torch.elastic.state import ObjectState, State, TorchState


def _reset():
    rejoin(init)


def run(func):
    """Decorator: runs func(state, *args, **kwargs) on the workers of the current generation,
    again after every reset, until it returns (Horovod's hvd.elastic.run)."""
    return run_fn(func, _reset)


__all__ = ["ElasticSampler", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
