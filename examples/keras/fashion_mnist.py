#!/usr/bin/env python3
"""Fashion-MNIST on N workers with hora.tensorflow.keras: the Horovod tutorial's Keras script
(NVIDIA DLI "Fashion-MNIST with Horovod", fashion_mnist_solution.py) with its six steps done.

    horarun -np 2 python examples/keras/fashion_mnist.py      # scripts/demo.sh --keras
    mpirun -np 2 python examples/keras/fashion_mnist.py       # OpenMPI's or MPICH's mpirun
    python examples/keras/fashion_mnist.py                    # one worker
    horarun -np 2 python examples/keras/fashion_mnist.py --width 10   # the tutorial's WRN-16-10

The steps are marked "Step N"; without them this is the tutorial's single-process script. It runs
on Keras 2 (TensorFlow 2.15, or tf_keras with TF_USE_LEGACY_KERAS=1), as the tutorial does, and
on Keras 3. Three changes from the tutorial's text, each for a reason given where it is made:
SGD(learning_rate=) instead of SGD(lr=), the schedule scaled by the worker count, and fit's
workers=4 passed to Keras 2 only. The defaults train a narrow WideResNet (WRN-10-1) with
momentum 0.9 and batches of 64, which reaches 85% in a few minutes on two cores;
`--width 10 --depth 16 --momentum 0 --batch-size 32` is the tutorial's configuration.

The data comes from the Debian package dataset-fashion-mnist: keras_datasets.py links its files
to where fashion_mnist.load_data() looks, which then reads them instead of downloading.
"""

import argparse
import os
import sys
from time import time

import tensorflow as tf
from tensorflow.keras import backend as K
from tensorflow.keras.datasets import fashion_mnist
from tensorflow.keras.layers import (Activation, Add, BatchNormalization, Conv2D, Dense, Dropout,
                                     GlobalAveragePooling2D, Input, MaxPooling2D)
from tensorflow.keras.preprocessing import image

# Step 1: import Horovod (hora's drop-in for horovod.tensorflow.keras).
import hora.tensorflow.keras as hvd
from keras_datasets import place_fashion_mnist

# Step 1: initialize Horovod.
hvd.init()

# Step 1: pin to a GPU (one per process, by local rank), where there are GPUs.
gpus = tf.config.experimental.list_physical_devices('GPU')
if gpus:
    tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')

# Which Keras tf.keras is: the package that defines its classes (keras or tf_keras), and its major version.
KERAS_PACKAGE = tf.keras.Model.__module__.split('.')[0]
KERAS_GENERATION = int(sys.modules[KERAS_PACKAGE].__version__.split('.')[0])

parser = argparse.ArgumentParser(description='Fashion MNIST Example',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--log-dir', default='./logs', help='tensorboard log directory')
parser.add_argument('--batch-size', type=int, default=64, help='input batch size for training (tutorial: 32)')
parser.add_argument('--val-batch-size', type=int, default=32, help='input batch size for validation')
parser.add_argument('--epochs', type=int, default=40, help='number of epochs to train')
parser.add_argument('--base-lr', type=float, default=0.01, help='learning rate for a single GPU')
parser.add_argument('--wd', type=float, default=0.000005, help='weight decay')
parser.add_argument('--target-accuracy', type=float, default=.85, help='Target accuracy to stop training')
parser.add_argument('--patience', type=float, default=2, help='Number of epochs that meet target before stopping')
# Not in the tutorial: the model's size, momentum, the CPU threads, and where the checkpoint goes.
parser.add_argument('--width', type=int, default=1, help='WideResNet width k: 16k, 32k, 64k channels (tutorial: 10)')
parser.add_argument('--depth', type=int, default=10, help='WideResNet depth 6n+4: n residual blocks per stage '
                    '(tutorial: 16)')
parser.add_argument('--momentum', type=float, default=0.9, help='SGD momentum (tutorial: 0)')
parser.add_argument('--no-augment', action='store_true', help='train without random flips and shifts')
parser.add_argument('--threads', type=int, default=0, help='TensorFlow threads per worker (0: cores / local workers)')
parser.add_argument('--checkpoint', default='checkpoints/fashion_mnist.keras',
                    help='the model, saved by rank 0 after every epoch')
args = parser.parse_args()
if (args.depth - 4) % 6 or args.depth < 10:
    parser.error('--depth must be 6n+4 with n >= 1 (10, 16, 22, ...)')

# Several workers share a host's cores: without a limit each would start a thread per core.
threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
tf.config.threading.set_intra_op_parallelism_threads(threads)
tf.config.threading.set_inter_op_parallelism_threads(threads)


# Define a function for a simple learning rate decay over time. The rate is scaled by the
# number of workers (Step 3's scaling): LearningRateScheduler sets it at every epoch's start,
# so an unscaled schedule would undo the scaling given to the optimizer.
def lr_schedule(epoch):
    lr = args.base_lr * hvd.size()
    if epoch < 15:
        return lr
    if epoch < 25:
        return 1e-1 * lr
    if epoch < 35:
        return 1e-2 * lr
    return 1e-3 * lr


def cbr(x, conv_size):
    channel_axis = 1 if K.image_data_format() == 'channels_first' else -1
    x = Conv2D(conv_size, (3, 3), padding='same')(x)
    x = BatchNormalization(axis=channel_axis)(x)
    x = Activation('relu')(x)
    return x


def conv_block(x, conv_size, scale_input=False):
    x_0 = x
    if scale_input:
        x_0 = Conv2D(conv_size, (1, 1), activation='linear', padding='same')(x_0)
    x = cbr(x, conv_size)
    x = Dropout(0.01)(x)
    x = cbr(x, conv_size)
    x = Add()([x_0, x])
    return x


def create_model():
    # Implementation of WideResNet (depth = 16, width = 10 in the tutorial) based on keras_contrib
    # https://github.com/keras-team/keras-contrib/blob/master/keras_contrib/applications/wide_resnet.py
    blocks = (args.depth - 4) // 6
    inputs = Input(shape=(28, 28, 1))
    x = cbr(inputs, 16)
    for stage, channels in enumerate([16 * args.width, 32 * args.width, 64 * args.width]):
        if stage:
            x = MaxPooling2D((2, 2))(x)
        for block in range(blocks):
            x = conv_block(x, channels, scale_input=block == 0)
    x = GlobalAveragePooling2D()(x)
    outputs = Dense(num_classes, activation='softmax')(x)
    model = tf.keras.models.Model(inputs, outputs)

    # Step 3: scale the learning rate by the number of workers. The tutorial's SGD(lr=...) is
    # ignored by Keras 2.11+ (it keeps the default 0.01) and rejected by Keras 3.
    opt = tf.keras.optimizers.SGD(learning_rate=args.base_lr * hvd.size(), momentum=args.momentum)

    # Step 3: wrap the optimizer in a Horovod distributed optimizer.
    opt = hvd.DistributedOptimizer(opt)

    model.compile(loss=tf.keras.losses.categorical_crossentropy, optimizer=opt, metrics=['accuracy'])
    return model


# Step 2: only set `verbose` to `1` if this is the root worker.
verbose = 1 if hvd.rank() == 0 else 0

# Input image dimensions
img_rows, img_cols = 28, 28
num_classes = 10

# Load Fashion MNIST data (from the Debian package, see keras_datasets.py).
place_fashion_mnist()
(x_train, y_train), (x_test, y_test) = fashion_mnist.load_data()

if K.image_data_format() == 'channels_first':
    x_train = x_train.reshape(x_train.shape[0], 1, img_rows, img_cols)
    x_test = x_test.reshape(x_test.shape[0], 1, img_rows, img_cols)
else:
    x_train = x_train.reshape(x_train.shape[0], img_rows, img_cols, 1)
    x_test = x_test.reshape(x_test.shape[0], img_rows, img_cols, 1)

# Convert class vectors to binary class matrices
y_train = tf.keras.utils.to_categorical(y_train, num_classes)
y_test = tf.keras.utils.to_categorical(y_test, num_classes)

# Training data iterator.
augment = {} if args.no_augment else dict(horizontal_flip=True, width_shift_range=0.2, height_shift_range=0.2)
train_gen = image.ImageDataGenerator(featurewise_center=True, featurewise_std_normalization=True, **augment)
train_gen.fit(x_train)
train_iter = train_gen.flow(x_train, y_train, batch_size=args.batch_size)

# Validation data iterator.
test_gen = image.ImageDataGenerator(featurewise_center=True, featurewise_std_normalization=True)
test_gen.mean = train_gen.mean
test_gen.std = train_gen.std
test_iter = test_gen.flow(x_test, y_test, batch_size=args.val_batch_size)

callbacks = []
callbacks.append(tf.keras.callbacks.LearningRateScheduler(lr_schedule))

# Step 4: broadcast initial variable states from the first worker to all others by adding the
# broadcast global variables callback.
callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))

# Step 6: average the metrics among workers at the end of every epoch by adding the metric
# average callback (before any callback that reads the metrics).
callbacks.append(hvd.callbacks.MetricAverageCallback())


class PrintThroughput(tf.keras.callbacks.Callback):
    def __init__(self, total_images=0):
        super().__init__()
        self.total_images = total_images

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start_time = time()

    def on_epoch_end(self, epoch, logs=None):
        epoch_time = time() - self.epoch_start_time
        images_per_sec = round(self.total_images / epoch_time, 2)
        print('Images/sec: {}'.format(images_per_sec))


if verbose:
    callbacks.append(PrintThroughput(total_images=len(y_train)))


class StopAtAccuracy(tf.keras.callbacks.Callback):
    """Stops when the (averaged) validation accuracy has exceeded the target `patience` epochs
    in a row: every worker sees the same average, so all stop after the same epoch."""

    def __init__(self, target=0.85, patience=2, verbose=0):
        super().__init__()
        self.target = target
        self.patience = patience
        self.verbose = verbose
        self.stopped_epoch = 0
        self.met_target = 0
        self.start_time = None
        self.time_to_target = None

    def on_train_begin(self, logs=None):
        self.start_time = time()

    def on_epoch_end(self, epoch, logs=None):
        if logs.get('val_accuracy') > self.target:
            self.met_target += 1
            if self.time_to_target is None:
                self.time_to_target = time() - self.start_time
        else:
            self.met_target = 0
        if self.met_target >= self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose == 1:
            print('Early stopping after epoch {}'.format(self.stopped_epoch + 1))


stop_at_accuracy = StopAtAccuracy(target=args.target_accuracy, patience=args.patience, verbose=verbose)
callbacks.append(stop_at_accuracy)


class PrintTotalTime(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.start_time = time()

    def on_epoch_end(self, epoch, logs=None):
        total_time = round(time() - self.start_time, 2)
        print("Cumulative training time after epoch {}: {}".format(epoch + 1, total_time))

    def on_train_end(self, logs=None):
        total_time = round(time() - self.start_time, 2)
        print("Cumulative training time: {}".format(total_time))


if verbose:
    callbacks.append(PrintTotalTime())

# Save checkpoints only on worker 0, to prevent other workers from corrupting them. The model is
# saved with its DistributedOptimizer, and loads without hora (or, for more training, with
# hvd.load_model).
if hvd.rank() == 0 and args.checkpoint:
    os.makedirs(os.path.dirname(os.path.abspath(args.checkpoint)), exist_ok=True)
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(args.checkpoint))

# Create the model.
model = create_model()

# Keras 3 dropped fit's `workers`: a PyDataset (what flow() returns there) carries its own.
loader_threads = {'workers': 4} if KERAS_GENERATION == 2 else {}

train_start = time()
# Step 5: keep the total number of steps the same despite an increased number of workers, and
# validate on 3 * num_test_iterations / number_of_workers batches per worker.
model.fit(train_iter,
          steps_per_epoch=len(train_iter) // hvd.size(),
          callbacks=callbacks,
          epochs=args.epochs,
          verbose=verbose,
          initial_epoch=0,
          validation_data=test_iter,
          validation_steps=3 * len(test_iter) // hvd.size(),
          **loader_threads)
train_time = time() - train_start

# Evaluate the model on the full data set.
score = model.evaluate(test_iter, steps=len(test_iter), verbose=verbose, **loader_threads)
if verbose:
    print('Test loss:', score[0])
    print('Test accuracy:', score[1])
    reached = score[1] > args.target_accuracy
    time_to_target = stop_at_accuracy.time_to_target
    print(f"RESULT accuracy={score[1]:.4f} target={args.target_accuracy} reached={'yes' if reached else 'no'} "
          f"time_to_target_s={time_to_target if time_to_target is not None else float('nan'):.1f} "
          f"train_time_s={train_time:.1f} "
          f"workers={hvd.size()} keras={KERAS_PACKAGE}-{sys.modules[KERAS_PACKAGE].__version__} "
          f"checkpoint={args.checkpoint}", flush=True)
