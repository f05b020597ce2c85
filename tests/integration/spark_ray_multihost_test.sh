#!/usr/bin/env bash
# hora.spark and hora.ray on real clusters across namespace hosts (netns_hosts.sh): a Spark
# standalone master on host 1 with a worker (one core) on each of hosts 2 and 3, then a Ray
# head on host 1 (no CPUs) with a node on each of hosts 2 and 3. The driver runs on host 1
# (runners_multihost.py); the ranks land on hosts 2 and 3 and talk over the hosts' link; a rank
# is killed, a host's link cut (Spark), then a whole host killed (every process in its
# namespace); on Ray also an elastic job that loses an actor. Every
# daemon binds its host's address and is stopped at the end, with everything else left in the
# hosts' namespaces.
#
# Needs root, and .venv with pyspark, ray and hora.torch (scripts/setup.sh); exits 77 (skipped)
# otherwise, unless HORA_REQUIRE_MULTIHOST=1.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$(cd "$here/../.." && pwd)/.venv
python=$venv/bin/python
# shellcheck source=netns_hosts.sh
source "$here/netns_hosts.sh"

skip() {
  echo "SKIP: $*"
  [ "${HORA_REQUIRE_MULTIHOST:-0}" = 1 ] && exit 1
  exit 77
}
hosts_available || skip "no namespace hosts"
"$python" -c 'import pyspark, ray, hora.torch' 2>/dev/null || skip "$python lacks pyspark, ray or hora.torch"

failures=0
check() {  # check DESCRIPTION STATUS
  if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi
}

# Every process in the hosts' namespaces (daemons and whatever they started), by pid: SIGTERM,
# then SIGKILL for what is still there after 3 s, until none is left (a dying daemon may still
# start a process) or 15 s have passed.
host_pids() {
  local i
  for i in $(seq 1 "${HOSTS_N:-0}"); do ip netns pids "${HOST_NS[$i]}" 2>/dev/null; done | tr '\n' ' '
}
stop_host_processes() {
  local pids tries=0
  pids=$(host_pids)
  # shellcheck disable=SC2086
  [ -n "${pids// /}" ] && kill $pids 2>/dev/null
  while pids=$(host_pids) && [ -n "${pids// /}" ] && [ $tries -lt 75 ]; do
    # shellcheck disable=SC2086
    [ $tries -ge 15 ] && kill -9 $pids 2>/dev/null
    sleep 0.2
    tries=$((tries + 1))
  done
  wait 2>/dev/null  # reaps the daemons this script started in the background
}

hosts_up 3 || exit 1
trap 'stop_host_processes; hosts_down' EXIT
h1=${HOST_IP[1]} h2=${HOST_IP[2]} h3=${HOST_IP[3]}
# For the driver's host-death checks: which namespace each host is.
export HOST_NAMESPACES="$h1=${HOST_NS[1]} $h2=${HOST_NS[2]} $h3=${HOST_NS[3]}"
# ... and which link (the bridge's end of its veth) each has, for the link-cut check.
export HOST_LINKS="$h1=hv${HOSTS_ID}h1 $h2=hv${HOSTS_ID}h2 $h3=hv${HOSTS_ID}h3" MACHINE_NETNS=/proc/$$/ns/net
logs=$HOSTS_DIR/logs
mkdir -p "$logs"

# --- Spark standalone ------------------------------------------------------------------------
spark_home=$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
spark_class=$spark_home/bin/spark-class
start=$SECONDS
on_host 1 env SPARK_HOME="$spark_home" SPARK_LOCAL_IP="$h1" "$spark_class" org.apache.spark.deploy.master.Master \
  --host "$h1" --port 7077 --webui-port 8080 >"$logs/master.log" 2>&1 &
for i in 2 3; do
  on_host "$i" env SPARK_HOME="$spark_home" SPARK_LOCAL_IP="${HOST_IP[$i]}" "$spark_class" \
    org.apache.spark.deploy.worker.Worker "spark://$h1:7077" --host "${HOST_IP[$i]}" --cores 1 --memory 1g \
    --webui-port 8081 --work-dir "$HOSTS_DIR/spark-work-$i" >"$logs/worker$i.log" 2>&1 &
done
# The driver's session waits for the master; the workers register within seconds.
on_host 1 env SPARK_LOCAL_IP="$h1" timeout 300 "$python" "$here/runners_multihost.py" spark "spark://$h1:7077" "$h1" \
  "$h2" "$h3" >"$logs/spark-driver.log" 2>&1
code=$?
grep -E "^(ok|   )" "$logs/spark-driver.log"
check "hora.spark.run on a standalone cluster across hosts 2 and 3 ($((SECONDS - start)) s with the daemons' start)" $code
[ $code = 0 ] || tail -40 "$logs/spark-driver.log"
# Stops every process of the hosts (the daemons and what they started) and checks none is left.
stop_and_check() {
  stop_host_processes
  local left
  left=$(for p in $(host_pids); do echo "$p:$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-80)"; done)
  [ -z "$left" ]; check "nothing of $1 is left running on the hosts${left:+ (left: $left)}" $?
}
stop_and_check Spark

# --- Ray ---------------------------------------------------------------------------------------
ray_bin=$venv/bin/ray
ray_tmp=$HOSTS_DIR/ray
start=$SECONDS
ray_common=(--temp-dir "$ray_tmp" --object-store-memory 100000000 --disable-usage-stats)
on_host 1 env RAY_NODE_IP_ADDRESS="$h1" "$ray_bin" start --head --node-ip-address "$h1" --port 6379 --num-cpus 0 \
  --include-dashboard false "${ray_common[@]}" >"$logs/ray-head.log" 2>&1
check "ray start --head on host 1" $?
for i in 2 3; do
  on_host "$i" "$ray_bin" start --address "$h1:6379" --node-ip-address "${HOST_IP[$i]}" --num-cpus 1 \
    "${ray_common[@]}" >"$logs/ray-node$i.log" 2>&1
  check "ray start on host $i" $?
done
# 600 s: the elastic job (one more set of actors to start) comes on top of the fixed ones.
on_host 1 timeout 600 "$python" "$here/runners_multihost.py" ray "$h1:6379" "$h1" "$h2" "$h3" \
  >"$logs/ray-driver.log" 2>&1
code=$?
grep -E "^(ok|   )" "$logs/ray-driver.log"
check "RayExecutor on a Ray cluster across hosts 2 and 3 ($((SECONDS - start)) s with the daemons' start)" $code
[ $code = 0 ] || tail -40 "$logs/ray-driver.log"
stop_and_check Ray

echo "$failures failure(s)"
[ $failures = 0 ]
