"""The `horovodrun` command of the compatibility package: horarun under Horovod's name.

horarun takes horovodrun's common flags (-np, -H/--hosts, --hostfile, -p, -i, --start-timeout,
--verbose, --output-filename, --network-interface, the tuning flags); `horarun --help` lists
them. What it lacks is refused by its parser with the flag's name.
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
