#!/usr/bin/env bash
# launch_bench.py on 2 hosts x 2 ranks: hosts are network namespaces with their own sshd (the
# test suite's tests/integration/netns_hosts.sh); both launchers reach host 2 over ssh.
# usage: benchmarks/launcher/multihost.sh BUILD_DIR [--repeat N]   (as root)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath "$1"); shift
. "$root/tests/integration/netns_hosts.sh"
hosts_available
hosts_up 2
python3 "$root/benchmarks/launcher/launch_bench.py" --bin "$build" --np 4 "$@" \
  --prefix "ip netns exec ${HOST_NS[1]}" --hosts "${HOST_IP[1]}:2,${HOST_IP[2]}:2" \
  --horarun-extra "-i $SSH_KEY" \
  --mpirun-extra "--mca plm_rsh_args -i$SSH_KEY --mca btl_tcp_if_include $HOSTS_SUBNET.0/24 --mca oob_tcp_if_include $HOSTS_SUBNET.0/24 -x HORA_RENDEZVOUS_ADDR=${HOST_IP[1]}"
