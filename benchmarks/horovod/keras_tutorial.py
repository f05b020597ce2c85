#!/usr/bin/env python3
"""Runs the tutorial's Keras script, examples/keras/fashion_mnist.py, with `import
hora.tensorflow.keras as hvd` meaning `import horovod.tensorflow.keras as hvd`: where hora is not
installed (Horovod's environment), the name is bound to Horovod's module before the script runs;
in hora's environment the script runs as it is, which is the same thing, since hora's `horovod`
alias is hora. side_by_side.py's tutorial set starts it with each framework's horovodrun and
reads the script's RESULT line (time to the target accuracy). Arguments go to the script."""

import importlib
import importlib.util
import os
import runpy
import sys
import types

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "keras",
                       "fashion_mnist.py")


def bind_hora_name_to_horovod():
    api = importlib.import_module("horovod.tensorflow.keras")
    hora = types.ModuleType("hora")
    hora.tensorflow = types.ModuleType("hora.tensorflow")
    hora.tensorflow.keras = api
    sys.modules.update({"hora": hora, "hora.tensorflow": hora.tensorflow, "hora.tensorflow.keras": api})


if __name__ == "__main__":
    if importlib.util.find_spec("hora") is None:
        bind_hora_name_to_horovod()
    sys.path.insert(0, os.path.dirname(EXAMPLE))  # its keras_datasets helper
    sys.argv = [EXAMPLE] + sys.argv[1:]
    runpy.run_path(EXAMPLE, run_name="__main__")
