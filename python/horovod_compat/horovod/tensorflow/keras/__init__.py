"""horovod.tensorflow.keras is hora.tensorflow.keras (Keras from tf.keras): the same functions,
callbacks and state under Horovod's names, submodules included (horovod.tensorflow.keras.callbacks
is hora.tensorflow.keras.callbacks)."""

import hora.tensorflow.keras
from hora.tensorflow.keras import *  # noqa: F401,F403  (the public API, as hvd.*)
from horovod._alias import alias_submodules

alias_submodules(__name__, hora.tensorflow.keras)
