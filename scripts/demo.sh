#!/usr/bin/env bash
# The main job, until the PyTorch example exists: allreduce bandwidth on 2 local ranks,
# checked, as a table in the style of nccl-tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup.sh
source .venv/bin/activate
horarun -np 2 hora-bench allreduce -b 4 -e 64M -f 4 -n 20 -w 5 -c 1
