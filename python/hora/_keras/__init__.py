"""The implementation shared by hora.tensorflow.keras (tf.keras) and hora.keras (the top-level
keras package), for Keras 2 and Keras 3 alike, as Horovod's horovod/_keras is shared by its two
Keras modules. Each public module binds it to its Keras: see keras_version.py for how the two
generations differ and where that matters."""
