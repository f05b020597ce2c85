#!/usr/bin/env bash
# launch_bench.py on 2 hosts x 4 ranks: hosts are network namespaces with their own sshd (the
# test suite's tests/integration/netns_hosts.sh); every launcher reaches host 2 over ssh and no
# HORA_* variable is set by hand (the mpirun jobs find rank 0 through PMIx / PMI-1).
# usage: benchmarks/launcher/multihost.sh BUILD_DIR [--repeat N] [--np 8]   (as root)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1"); shift
. "$root/tests/integration/netns_hosts.sh"
hosts_available
hosts_up 2
printf '#!/bin/sh\nexec ssh -i %s -o StrictHostKeyChecking=no -o BatchMode=yes "$@"\n' "$SSH_KEY" >"$HOSTS_DIR/hydra_ssh"
chmod +x "$HOSTS_DIR/hydra_ssh"
per_host=4
python3 "$root/benchmarks/launcher/launch_bench.py" --bin "$build" --np 8 "$@" \
  --prefix "ip netns exec ${HOST_NS[1]}" --hosts "${HOST_IP[1]}:$per_host,${HOST_IP[2]}:$per_host" \
  --horarun-extra "-i $SSH_KEY" \
  --mpirun-extra "--mca plm_rsh_args -i$SSH_KEY" \
  --mpich-extra "-launcher ssh -launcher-exec $HOSTS_DIR/hydra_ssh"
