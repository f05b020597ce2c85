"""An elastic Keras job for the tests (tests/python/test_keras_elastic_job.py), written as
Horovod's elastic Keras example is: hvd.elastic.KerasState, model.fit inside @hvd.elastic.run,
and the commit / batch / epoch callbacks; with --mode ps-sync or ps-async, through horarun's
--servers.

Each batch prints "step <time> gen=<generation> rank=<rank> size=<size> pid=<pid> epoch=<epoch>
batch=<batch>"; after a reset, "reset: size <size> epoch=<epoch> batch=<batch> slots=<sum>" with
the state as restored (slots: the sum of the magnitudes of the optimizer's slots); at the end
"done rank=<rank> size=<size> epochs=<epochs> identical=<bool> server_step=<step>", where
identical says that every rank holds the same weights bit for bit and server_step is the step
count the servers' optimizer reached (ps-async; None otherwise).
"""

import argparse
import os
import time

import numpy as np
import tensorflow as tf

import hora.tensorflow as htf
import hora.tensorflow.keras as hvd
from hora.common.identity import identity

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--steps", type=int, default=20, help="batches per epoch")
p.add_argument("--step-sleep", type=float, default=0.05)
p.add_argument("--hold-until-size", type=int, default=0,
               help="at the end of an epoch, keep committing (up to 120 s) while the job is smaller: "
                    "time for a worker that was added to start and join")
p.add_argument("--mode", default="allreduce", help="DistributedOptimizer's mode (ps-sync: horarun --servers)")
p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
args = p.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
rs = np.random.RandomState(hvd.rank())
x = rs.randn(64, 4).astype(np.float32)
y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

tf.keras.utils.set_random_seed(hvd.rank())  # different initial weights: the state's sync must fix them
model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(1)])
inner = tf.keras.optimizers.SGD(learning_rate=0.02, momentum=0.9) if args.optimizer == "sgd" else \
    tf.keras.optimizers.Adam(learning_rate=0.02)
model.compile(optimizer=hvd.DistributedOptimizer(inner, mode=args.mode), loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def slots():
    variables = model.optimizer.variables() if callable(model.optimizer.variables) else model.optimizer.variables
    arrays = [np.asarray(v.numpy()) for v in variables]
    return sum(float(np.abs(a).sum()) for a in arrays if a.dtype == np.float32 and a.ndim)


state.register_reset_callbacks([lambda: print(f"reset: size {hvd.size()} epoch={state.epoch} batch={state.batch} "
                                              f"slots={slots():.6g}", flush=True)])


class PrintStep(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print(f"step {time.time():.3f} gen={identity()['generation']} rank={hvd.rank()} size={hvd.size()} "
              f"pid={os.getpid()} epoch={state.epoch} batch={batch}", flush=True)
        time.sleep(args.step_sleep)
        if batch == args.steps - 1 and hvd.size() < args.hold_until_size:
            deadline = time.time() + 120
            while time.time() < deadline:
                time.sleep(0.1)
                state.commit()  # raises HostsUpdatedInterrupt once the new worker has joined


callbacks = [hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
             hvd.elastic.CommitStateCallback(state), PrintStep()]


@hvd.elastic.run
def train(state):
    state.model.fit(dataset, steps_per_epoch=args.steps, epochs=args.epochs - state.epoch, callbacks=callbacks,
                    verbose=0)


train(state)
flat = tf.concat([tf.reshape(w, [-1]) for w in model.get_weights()], 0)
same = bool(tf.reduce_all(htf.allreduce(flat, op=htf.Min, name="elastic.min") ==
                          htf.allreduce(flat, op=htf.Max, name="elastic.max")))
print(f"done rank={hvd.rank()} size={hvd.size()} epochs={state.epoch} identical={same} "
      f"server_step={model.optimizer.pull_server_state()}", flush=True)
