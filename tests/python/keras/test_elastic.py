"""hvd.elastic for Keras: KerasState saves, restores and syncs a model and its optimizer; the
callbacks commit it and keep its epoch and batch, so that a fit restarted after a reset resumes
where the last commit was."""

import numpy as np
import tensorflow as tf

import hora.tensorflow.keras as hvd
from keras_helpers import assert_all_close, gathered, mlp


def compiled(seed):
    model = mlp(tf.keras, seed=seed)
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)),
                  loss="mse")
    return model


def data(rows=12):
    rs = np.random.RandomState(3 + hvd.rank())
    return rs.randn(rows, 5).astype(np.float32), rs.randn(rows, 3).astype(np.float32)


class CountingState(hvd.elastic.KerasState):
    def __init__(self, *args, **kwargs):
        self.commits = 0
        super().__init__(*args, **kwargs)

    def commit(self):
        self.commits += 1
        super().commit()


def test_callbacks_commit_and_track_epoch_and_batch():
    model = compiled(0)
    x, y = data()
    model.fit(x[:2], y[:2], batch_size=2, verbose=0)  # builds the optimizer's slots
    state = CountingState(model, batch=0, epoch=0)
    seen = []
    probe = tf.keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: seen.append((state.epoch, state.batch)))
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, steps_per_epoch=6,
              callbacks=[hvd.elastic.CommitStateCallback(state, batches_per_commit=4),
                         hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
                         probe])
    # 12 batches: a commit after batches 4, 8 and 12 of the run (counted across epochs), and one
    # at each of the two epochs' ends.
    assert state.commits == 3 + 2
    assert seen == [(0, b) for b in range(6)] + [(1, b) for b in range(6)]
    assert (state.epoch, state.batch) == (2, 0)


def test_the_first_epoch_after_a_reset_is_announced_shorter():
    """As Horovod's: the epoch's `steps` parameter, which callbacks such as the progress bar read,
    is cut by the batches the restored state had done; the next epoch has them all again."""
    model = compiled(0)
    x, y = data()
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    state.batch = 4  # as if restored from a commit made after batch 4 of the epoch
    update = hvd.elastic.UpdateBatchStateCallback(state)
    steps = []
    probe = tf.keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: steps.append(update.params["steps"]))
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, steps_per_epoch=6, callbacks=[update, probe])
    assert steps == [2, 6]
    assert state.batch == 0


def test_keras_state_restores_the_last_commit_and_syncs_from_rank_0():
    model = compiled(seed=10 + hvd.rank())  # each rank its own weights
    x, y = data()
    model.fit(x[:2], y[:2], batch_size=2, verbose=0)
    state = hvd.elastic.KerasState(model, epoch=3)
    committed = [w.copy() for w in model.get_weights()]
    committed_slots = [v.numpy().copy() for v in model.optimizer.variables]
    model.fit(x, y, batch_size=2, verbose=0)
    state.epoch = 5
    state.restore()
    restored = model.get_weights()
    restored_slots = [v.numpy() for v in model.optimizer.variables]
    restored_epoch = state.epoch
    state.sync()
    everyone = gathered(model.get_weights())
    assert restored_epoch == 3
    assert_all_close(restored, committed, rtol=0, atol=0)
    assert_all_close(restored_slots, committed_slots, rtol=0, atol=0)
    rank0 = mlp(tf.keras, seed=10).get_weights()
    for weights in everyone:
        assert_all_close(weights, everyone[0], rtol=0, atol=0)
    assert not np.allclose(everyone[0][0], rank0[0])  # rank 0's trained weights, not its initial ones
