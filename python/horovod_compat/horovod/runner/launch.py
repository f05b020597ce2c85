"""The `horovodrun` command of the compatibility package: horarun under Horovod's name.

horarun takes every flag of horovodrun's parser with its meaning (--config-file included), but
the elastic and autotune ones, in horovodrun's groups (`horarun --help`); what cannot apply
here (--jsrun, NCCL's flags) is refused saying why, and the rest by its parser with the flag's
name.
"""

import os
import shutil
import sys


def main():
    beside = os.path.join(os.path.dirname(sys.executable), "horarun")
    horarun = beside if os.access(beside, os.X_OK) else shutil.which("horarun")
    if horarun is None:
        sys.exit("horovodrun: horarun is not on PATH (install hora)")
    os.execv(horarun, [horarun] + sys.argv[1:])
