#!/usr/bin/env python3
"""Fashion-MNIST with hora.tensorflow.keras as a Spark job: Databricks' HorovodRunner form, each
rank a Spark task of one barrier stage (the Keras counterpart of fashion_mnist_spark.py).

    export PYSPARK_PYTHON=$PWD/.venv/bin/python            # what the executors run
    .venv/bin/python examples/spark/fashion_mnist_keras_spark.py --master 'local-cluster[2,1,1024]' --np 2
    .venv/bin/python examples/spark/fashion_mnist_keras_spark.py --np -2     # no Spark: 2 processes here

Each rank trains a small CNN on its shard of the training images (every size-th image from its
rank on), with the Horovod recipe: the learning rate scaled by the number of ranks, the optimizer
wrapped in hvd.DistributedOptimizer, rank 0's initial weights broadcast, the metrics averaged.
It returns the test loss before and after training and the test accuracy, averaged over the
ranks' shards of the test set, and a digest of its weights. The data comes from the Debian
package dataset-fashion-mnist, linked where Keras looks by examples/keras/keras_datasets.py,
which must be readable at the same path on every executor.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATASETS_MODULE = os.path.join(HERE, "..", "keras", "keras_datasets.py")

DEFAULTS = dict(epochs=2, steps_per_epoch=40, batch_size=64, lr=0.001, test_images=2000, seed=42)


def _model(tf, seed):
    tf.keras.utils.set_random_seed(seed)  # rank 0's draw is broadcast anyway; this makes runs repeatable
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])


def _shard(images, labels, rank, size, limit=None):
    images, labels = images[rank::size], labels[rank::size]
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return images.reshape(-1, 28, 28, 1).astype("float32") / 255.0, labels


def train(options):
    """One rank. ``options``: DEFAULTS' keys. Returns rank, size, the averaged test loss before
    and after training, the averaged test accuracy, the training loss per epoch and the weights."""
    import tensorflow as tf

    import hora.tensorflow
    import hora.tensorflow.keras as hvd
    from keras_datasets import place_fashion_mnist  # shipped to the executors by addPyFile

    o = dict(DEFAULTS, **options)
    hvd.init()
    # The ranks of one host share its cores.
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    place_fashion_mnist()
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    x_train, y_train = _shard(x_train, y_train, hvd.rank(), hvd.size())
    x_test, y_test = _shard(x_test, y_test, hvd.rank(), hvd.size(), o["test_images"] // hvd.size())

    model = _model(tf, o["seed"])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=o["lr"] * hvd.size()))
    model.compile(loss="sparse_categorical_crossentropy", optimizer=optimizer, metrics=["accuracy"])

    def test_metrics():
        loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
        return [float(v) for v in hvd.allreduce([loss, accuracy], op=hvd.Average).numpy()]

    # Rank 0's initial weights everywhere before the first measurement (the callback below would
    # broadcast them only when fit starts).
    hora.tensorflow.broadcast_variables(model.variables, root_rank=0)
    loss_before, _ = test_metrics()
    history = model.fit(x_train, y_train, batch_size=o["batch_size"], epochs=o["epochs"],
                        steps_per_epoch=o["steps_per_epoch"], verbose=2 if hvd.rank() == 0 else 0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    loss_after, accuracy = test_metrics()
    if hvd.rank() == 0:
        print(f"RESULT test loss {loss_before:.4f} -> {loss_after:.4f}, accuracy={accuracy:.4f}", flush=True)
    return dict(rank=hvd.rank(), size=hvd.size(), loss_before=loss_before, loss_after=loss_after,
                accuracy=accuracy, train_loss=[float(v) for v in history.history["loss"]],
                weights=[w.copy() for w in model.get_weights()])


def ship(spark):
    """Makes keras_datasets importable on the executors (np > 0) or here (np < 0)."""
    if spark is not None:
        spark.sparkContext.addPyFile(os.path.abspath(DATASETS_MODULE))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(DATASETS_MODULE)))


def run(np, options, spark=None):
    """HorovodRunner(np).run(train): np > 0 on the active session's executors, np < 0 locally.
    Rank 0's result."""
    from hora.spark import HorovodRunner

    ship(spark)
    return HorovodRunner(np=np).run(train, options=options)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default="local-cluster[2,1,1024]", help="Spark master URL")
    p.add_argument("--np", type=int, default=2, help="ranks: n Spark tasks, or -n processes on the driver")
    for name, value in DEFAULTS.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    args = p.parse_args()
    options = {name: getattr(args, name) for name in DEFAULTS}
    if args.np < 0:
        result = run(args.np, options)
    else:
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(args.master).appName("hora fashion-mnist keras")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        try:
            result = run(args.np, options, spark)
        finally:
            spark.stop()
    print(f"test loss {result['loss_before']:.4f} -> {result['loss_after']:.4f}, accuracy {result['accuracy']:.4f}")


if __name__ == "__main__":
    main()
