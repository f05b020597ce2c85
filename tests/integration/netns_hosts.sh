# shellcheck shell=bash
# Hosts for multi-host tests on one machine: network namespaces on a private bridge, each with
# its own address and sshd, so that horarun, ssh and MPI see separate hosts (sourced).
#
#   hosts_up 3          # HOST_IP[1..3], HOST_NS[1..3], HOSTS_SUBNET, SSH_KEY; sshd in each,
#                       # whose sessions see hostname hora-h<i>
#   on_host 1 cmd...    # runs cmd inside host 1's network namespace
#   hosts_pgrep REGEX   # pids of this run's hosts whose command line matches (grep -E)
#   cap_links 1gbit     # caps every host's link to that tc rate, both directions
#   hosts_down          # (also run on EXIT) removes namespaces, bridge, daemons, keys
#
# Needs root and iproute2; hosts_available says whether this machine can (exit 77 = skip).
# Only addresses made here carry traffic: the hosts have no default route.

hosts_available() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: multi-host tests need root (network namespaces)"; return 1; }
  command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; return 1; }
  [ -x /usr/sbin/sshd ] || { echo "SKIP: openssh-server is not installed (scripts/setup.sh installs it)"; return 1; }
  ip netns add hora-probe$$ 2>/dev/null || { echo "SKIP: cannot create network namespaces here"; return 1; }
  ip netns del hora-probe$$
}

hosts_up() {
  local n=$1 i
  HOSTS_ID=$(( $$ % 10000 ))
  HOSTS_DIR=$(mktemp -d /tmp/hora-hosts.XXXXXX)
  HOSTS_BRIDGE="hbr$HOSTS_ID"
  HOSTS_SUBNET="10.199.$(( HOSTS_ID % 250 ))"
  HOSTS_N=$n
  trap hosts_down EXIT
  ip link add "$HOSTS_BRIDGE" type bridge
  ip link set "$HOSTS_BRIDGE" up
  ssh-keygen -q -t ed25519 -N '' -f "$HOSTS_DIR/client_key"
  ssh-keygen -q -t ed25519 -N '' -f "$HOSTS_DIR/host_key"
  cp "$HOSTS_DIR/client_key.pub" "$HOSTS_DIR/authorized_keys"
  SSH_KEY="$HOSTS_DIR/client_key"
  mkdir -p /run/sshd
  for i in $(seq 1 "$n"); do
    HOST_NS[$i]="hora${HOSTS_ID}h$i"
    HOST_IP[$i]="$HOSTS_SUBNET.$i"
    ip netns add "${HOST_NS[$i]}"
    ip link add "hv${HOSTS_ID}h$i" type veth peer name eth0 netns "${HOST_NS[$i]}"
    ip link set "hv${HOSTS_ID}h$i" master "$HOSTS_BRIDGE" up
    ip -n "${HOST_NS[$i]}" link set lo up
    ip -n "${HOST_NS[$i]}" addr add "${HOST_IP[$i]}/24" dev eth0
    ip -n "${HOST_NS[$i]}" link set eth0 up
    cat >"$HOSTS_DIR/sshd_$i.conf" <<EOF
ListenAddress ${HOST_IP[$i]}
HostKey $HOSTS_DIR/host_key
PidFile $HOSTS_DIR/sshd_$i.pid
AuthorizedKeysFile $HOSTS_DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
EOF
    # Its own UTS namespace gives the host its own hostname, which ssh sessions inherit.
    ip netns exec "${HOST_NS[$i]}" unshare --uts sh -c \
      "hostname hora-h$i && exec /usr/sbin/sshd -f '$HOSTS_DIR/sshd_$i.conf' -E '$HOSTS_DIR/sshd_$i.log'"
  done
  for i in $(seq 1 "$n"); do
    # This run's host key replaces any a former run left in known_hosts under the same address.
    ssh-keygen -R "${HOST_IP[$i]}" >/dev/null 2>&1 || true  # (fails when there is no known_hosts yet)
    local tries=0
    until on_host 1 ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o LogLevel=ERROR -i "$SSH_KEY" \
          "${HOST_IP[$i]}" true 2>/dev/null; do
      tries=$((tries + 1))
      [ $tries -lt 50 ] || { echo "sshd on host $i did not come up"; cat "$HOSTS_DIR/sshd_$i.log"; return 1; }
      sleep 0.1
    done
  done
}

on_host() {
  local i=$1; shift
  ip netns exec "${HOST_NS[$i]}" "$@"
}

# Like `pgrep -f`, but only over the processes in this run's namespaces: a machine-wide pgrep
# would also count the processes of another test run on the same machine.
hosts_pgrep() {
  local i pid
  for i in $(seq 1 "$HOSTS_N"); do
    for pid in $(ip netns pids "${HOST_NS[$i]}"); do
      # One line per process, as pgrep sees it: arguments may hold newlines (ssh's remote
      # command does). A process may end between the listing and the read: it matches nothing.
      { tr '\0\n' '  ' <"/proc/$pid/cmdline"; } 2>/dev/null | sed 's/ $//' | grep -Eq -- "$1" && echo "$pid"
    done
  done
  return 0
}

# tbf on both ends of each host's link: egress inside the host and on the bridge's side (this
# kernel has no netem, so rate is all there is).
cap_links() {
  local i
  for i in $(seq 1 "$HOSTS_N"); do
    on_host "$i" tc qdisc replace dev eth0 root tbf rate "$1" burst 1mbit latency 50ms
    tc qdisc replace dev "hv${HOSTS_ID}h$i" root tbf rate "$1" burst 1mbit latency 50ms
  done
}

# hosts_down, after killing whatever still runs inside the hosts (a stray rank, a server, sshd):
# the EXIT trap of a benchmark whose jobs a failure or Ctrl-C may leave behind.
hosts_kill_and_down() {
  local i pids
  for i in $(seq 1 "${HOSTS_N:-0}"); do
    pids=$(ip netns pids "${HOST_NS[$i]}" 2>/dev/null || true)
    # shellcheck disable=SC2086  # one pid per word
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  done
  hosts_down
}

hosts_down() {
  local i
  [ -n "${HOSTS_DIR:-}" ] || return 0
  for i in $(seq 1 "${HOSTS_N:-0}"); do
    [ -f "$HOSTS_DIR/sshd_$i.pid" ] && kill "$(cat "$HOSTS_DIR/sshd_$i.pid")" 2>/dev/null
    ip netns del "${HOST_NS[$i]}" 2>/dev/null
    ssh-keygen -R "${HOST_IP[$i]}" >/dev/null 2>&1 || true  # (fails when there is no known_hosts yet)
  done
  ip link del "$HOSTS_BRIDGE" 2>/dev/null
  rm -rf "$HOSTS_DIR"
  HOSTS_DIR=
}
