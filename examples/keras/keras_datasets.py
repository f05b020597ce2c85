#!/usr/bin/env python3
"""Puts the Fashion-MNIST files of the Debian package dataset-fashion-mnist where Keras looks for
them, so that `tf.keras.datasets.fashion_mnist.load_data()` reads them instead of downloading:

    python examples/keras/keras_datasets.py        # prints where the links are

load_data() asks keras.utils.get_file for each of the four .gz files in the cache subdirectory
datasets/fashion-mnist, with no hash to check, and downloads only a file that is not there. The
cache directory differs between the Keras generations:
- Keras 2 (keras <= 2.15, tf_keras): ~/.keras;
- Keras 3: $KERAS_HOME when set, else ~/.keras;
Keras creates that directory when it is imported, and get_file falls back to /tmp/.keras when
it is not writable (Keras 3 also when the home directory is not). The files are symlinked into
each of these, so both generations find them; a file already there (a real download of the same
data) is left alone.
"""

import os
import sys

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
FILES = ["train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz"]


def _writable_or_tmp(directory):
    try:
        os.makedirs(directory, exist_ok=True)  # as importing Keras does
    except OSError:
        pass
    return directory if os.access(directory, os.W_OK) else os.path.join("/tmp", ".keras")


def keras_cache_dirs():
    """The cache directories that the two Keras generations' get_file use, as each decides it."""
    home = os.path.expanduser("~")
    keras2 = _writable_or_tmp(os.path.join(home, ".keras"))
    keras3_home = os.environ.get("KERAS_HOME") or os.path.join(home if os.access(home, os.W_OK) else "/tmp",
                                                               ".keras")
    return sorted({keras2, _writable_or_tmp(keras3_home)})


def _link(source, target):
    if os.path.lexists(target) and not (os.path.islink(target) and not os.path.exists(target)):
        return  # a file or a live link is there already
    # Through a temporary name and a rename: every rank of a job may run this at once.
    temporary = f"{target}.{os.getpid()}.tmp"
    os.symlink(source, temporary)
    os.replace(temporary, target)


def place_fashion_mnist(source_dir=DEBIAN_DIR):
    """Links the four files into every Keras cache directory; returns the directories. Raises
    FileNotFoundError naming the package when the files are not installed."""
    missing = [f for f in FILES if not os.path.exists(os.path.join(source_dir, f))]
    if missing:
        raise FileNotFoundError(f"{source_dir} lacks {', '.join(missing)}: install the Debian package "
                                "dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
    placed = []
    for cache in keras_cache_dirs():
        directory = os.path.join(cache, "datasets", "fashion-mnist")
        os.makedirs(directory, exist_ok=True)
        for name in FILES:
            _link(os.path.join(source_dir, name), os.path.join(directory, name))
        placed.append(directory)
    return placed


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else DEBIAN_DIR
    for d in place_fashion_mnist(source):
        print(f"Fashion-MNIST from {source} is linked into {d}")
