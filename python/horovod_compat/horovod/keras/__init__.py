"""horovod.keras is hora.keras (Keras from the top-level keras package): the same functions,
callbacks and state under Horovod's names, submodules included (horovod.keras.callbacks is
hora.keras.callbacks)."""

import hora.keras
from hora.keras import *  # noqa: F401,F403  (the public API, as hvd.*)
from horovod._alias import alias_submodules

alias_submodules(__name__, hora.keras)
