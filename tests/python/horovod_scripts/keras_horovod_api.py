"""A Keras training script written only against Horovod's API (`import horovod.tensorflow.keras
as hvd`), in the shape of the Horovod tutorial of seed 000 (tf.optimizers.Adam(lr * size), the
broadcast and metric-average callbacks, steps per epoch divided by the size), for
tests/python/test_horovod_compat.py. It trains a small model on synthetic data in which every
rank holds different samples, then checks what a Horovod user relies on: every rank ends with
the same weights, and every rank's averaged loss is the same.

    horovodrun -np 2 python keras_horovod_api.py
"""

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd

hvd.init()
gpus = tf.config.experimental.list_physical_devices("GPU")
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

rs = np.random.RandomState(hvd.rank())  # each rank its own data and its own initial weights
x = rs.randn(256, 8).astype(np.float32)
y = (x @ np.arange(8.0).reshape(8, 1)).astype(np.float32)
tf.keras.utils.set_random_seed(hvd.rank())
model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = hvd.DistributedOptimizer(tf.optimizers.Adam(0.001 * hvd.size()))
model.compile(optimizer=opt, loss="mse")
history = model.fit(x, y, batch_size=32, steps_per_epoch=8 // hvd.size(), epochs=2,
                    verbose=1 if hvd.rank() == 0 else 0,
                    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

flat = np.concatenate([w.ravel() for w in model.get_weights()])
everyone = hvd.allgather(flat[None, :]).numpy()
losses = hvd.allgather([history.history["loss"][-1]]).numpy()
print(f"rank {hvd.rank()}: weights equal rank 0's: {bool(np.array_equal(everyone[0], flat))}, "
      f"averaged loss equal on every rank: {bool(np.all(losses == losses[0]))}", flush=True)
