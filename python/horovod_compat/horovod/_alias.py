"""Makes a horovod.* package name the hora package that answers it: the module objects
themselves, not copies, so that both names share one state."""

import importlib
import pkgutil
import sys


def alias_submodules(name, package):
    """Registers every submodule (and subpackage) of the hora package `package` as `name`.<sub>,
    so that `import horovod.keras.callbacks` returns hora.keras.callbacks instead of loading
    the file a second time under another name (which would make a second set of classes)."""
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        alias = name + module.name[len(package.__name__):]
        sys.modules[alias] = importlib.import_module(module.name)
        parent, _, child = alias.rpartition(".")
        setattr(sys.modules[parent], child, sys.modules[alias])
