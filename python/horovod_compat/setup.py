"""Installs the `horovod` name as an alias of hora, and refuses to when Horovod itself is
installed: both would own site-packages/horovod, and overwriting a user's real Horovod is never
what they asked for."""

import importlib.metadata
import sys

from setuptools import setup


def real_horovod_version():
    try:
        return importlib.metadata.version("horovod")
    except importlib.metadata.PackageNotFoundError:
        return None


found = real_horovod_version()
if found is not None:
    sys.exit(f"hora-horovod-compat: Horovod {found} is installed in this environment; this package "
             "would replace its `horovod` module. Use a separate virtualenv, or `import hora.torch` "
             "directly.")
setup()
