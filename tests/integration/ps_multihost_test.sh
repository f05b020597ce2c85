#!/usr/bin/env bash
# Parameter servers across hosts (docs/parameter_servers.md), on namespace hosts (netns_hosts.sh):
# `--servers K` puts the servers on the ranks' hosts in turn, `--server-hosts` on hosts of their
# own; each server really runs in its host's network namespace (checked from /proc), the workers
# reach it over TCP, and ps-sync gives every rank what allreduce gives. A worker killed on a
# remote host leaves the others of an async job training; a server killed on its own host is
# named by every worker within seconds.
# usage: ps_multihost_test.sh HORARUN        (exit 77: skipped, with the reason)
set -uo pipefail
horarun=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
venv=$(cd "$here/../.." && pwd)/.venv
# shellcheck source=netns_hosts.sh
. "$here/netns_hosts.sh"
hosts_available || { [ "${HORA_REQUIRE_MULTIHOST:-0}" = 1 ] && exit 1; exit 77; }
"$venv/bin/python" -c 'import hora.torch' 2>/dev/null || { echo "SKIP: hora.torch is not installed in $venv"; exit 77; }
hosts_up 3 || exit 1
passed=0 failed=0
check() {  # check NAME CONDITION-EXIT-CODE
  if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "ok: $1"; else failed=$((failed + 1)); echo "FAILED: $1"; fi
}
tmp="$HOSTS_DIR/work"
mkdir -p "$tmp"
cd "$tmp" || exit 1
h1=${HOST_IP[1]} h2=${HOST_IP[2]} h3=${HOST_IP[3]}
run() {  # horarun on host 1, with the venv on PATH as a user's shell has it
  on_host 1 env PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$horarun" -i "$SSH_KEY" --start-timeout 300 "$@"
}

# Each rank trains a linear layer 3 steps with ps-sync, then with allreduce, and says whether they
# agree; rank 0 also writes, for each server of this job (found by the job secret in its
# environment), the network namespace it runs in.
cat >"$tmp/train.py" <<'EOF'
import os, subprocess, sys, time
import numpy as np, torch
import hora.torch as hvd
mode_async = len(sys.argv) > 1 and sys.argv[1] == "async"
hvd.init()
r = hvd.rank()

def servers_where():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"--ps-server" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            env = dict(v.split(b"=", 1) for v in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if env.get(b"HORA_SECRET", b"").decode() == os.environ["HORA_SECRET"]:
            ns = subprocess.run(["ip", "netns", "identify", pid], capture_output=True, text=True).stdout.strip()
            found.append(f"{env[b'HORA_PS_SERVER_INDEX'].decode()} {ns}")
    return sorted(found)

results = {}
for mode in (["ps-async"] if mode_async else ["ps-sync", "allreduce"]):
    torch.manual_seed(0)
    m = torch.nn.Linear(200, 50)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(), mode=mode)
    g = torch.Generator().manual_seed(100 + r)
    x, y = torch.randn(16, 200, generator=g), torch.randn(16, 50, generator=g)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    if r == 0 and mode != "allreduce":
        open("servers", "w").write("\n".join(servers_where()) + "\n")
    results[mode] = torch.cat([p.detach().flatten() for p in m.parameters()]).numpy()
if mode_async:
    print(f"rank {r} async steps {opt.parameter_server_step.step}", flush=True)
else:
    print(f"rank {r} agree {np.allclose(results['ps-sync'], results['allreduce'], rtol=1e-5, atol=1e-6)}",
          flush=True)
EOF

ns() { echo "${HOST_NS[$1]}"; }

run -np 4 -H "$h1:2,$h2:2" --servers 2 python train.py >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && [ "$(grep -c '<stdout>:rank [0-3] agree True' "$tmp/out")" = 4 ]
check "--servers 2 across 2 hosts: ps-sync equals allreduce on every rank (code $code)" $?
[ "$code" = 0 ] || tail -n 20 "$tmp/out"
[ "$(cat "$tmp/servers" 2>/dev/null | tr '\n' ';')" = "0 $(ns 1);1 $(ns 2);" ]
check "--servers 2: server 0 runs on the first rank host, server 1 on the second ($(tr '\n' ';' <"$tmp/servers"))" $?

rm -f "$tmp/servers"
run -np 2 -H "$h1:1,$h2:1" --server-hosts "$h3:2" python train.py >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && [ "$(grep -c '<stdout>:rank [01] agree True' "$tmp/out")" = 2 ]
check "--server-hosts h3:2: ps-sync equals allreduce, every pair over TCP (code $code)" $?
[ "$code" = 0 ] || tail -n 20 "$tmp/out"
[ "$(cat "$tmp/servers" 2>/dev/null | tr '\n' ';')" = "0 $(ns 3);1 $(ns 3);" ]
check "--server-hosts h3:2: both servers run on the dedicated host ($(tr '\n' ';' <"$tmp/servers"))" $?

run -np 2 -H "$h1:1,$h2:1" --server-hosts "$h2:1,$h3:1" python train.py async >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && [ "$(grep -c '<stdout>:rank [01] async steps 3' "$tmp/out")" = 2 ]
check "--server-hosts on a rank's host and a host of its own: ps-async steps on both ranks (code $code)" $?
[ "$code" = 0 ] || tail -n 20 "$tmp/out"

# An async job goes on without a worker that dies: rank 3, on the second host (under that host's
# agent), kills itself at its step 5; the other three reach step 30, and the job ends with 0.
cat >"$tmp/dying.py" <<'EOF'
import os, signal, time, torch
import hora.torch as hvd
hvd.init()
r = hvd.rank()
p = torch.nn.Parameter(torch.zeros(1000))
opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.01), named_parameters=[("p", p)], mode="ps-async",
                               max_staleness=2)
for s in range(1, 31):
    if r == 3 and s == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    (p - 1.0).pow(2).sum().backward()
    opt.step()
    time.sleep(0.02)
print(f"rank {r} async done {opt.parameter_server_step.step}", flush=True)
EOF
run -np 4 -H "$h1:2,$h2:2" --servers 1 python dying.py >"$tmp/out" 2>&1
code=$?
[ "$code" = 0 ] && [ "$(grep -c '<stdout>:rank [012] async done 30' "$tmp/out")" = 3 ] &&
  grep -q "rank 3 on host .* was killed by signal 9 (Killed); the job trains asynchronously" "$tmp/out"
check "ps-async: a worker killed on a remote host, the other 3 go on to the end (code $code)" $?
[ "$code" = 0 ] || tail -n 20 "$tmp/out"

# A server killed on its dedicated host: horarun names it, and both ranks end within seconds.
# horarun stops the job at the server's death and the remote rank's output goes with its ssh, so
# each rank writes what it caught to a file (the hosts share this machine's file system), and
# ignores the signals that stop it, so that it stays to write it (the grace period is long).
cat >"$tmp/stepping.py" <<'EOF'
import signal, sys, time, torch
import hora.torch as hvd
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
hvd.init()
p = torch.nn.Parameter(torch.ones(1000))
opt = hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), named_parameters=[("p", p)], mode="ps-sync")
s = 0
try:
    while True:
        s += 1
        p.grad = torch.ones(1000)
        opt.step()
        print(f"step {s}", flush=True)
        time.sleep(0.05)
except Exception as e:
    with open(f"{sys.argv[1]}/caught.{hvd.rank()}", "w") as f:
        f.write(f"{time.time():.3f} {type(e).__name__}: {e}\n")
    raise SystemExit(3)
EOF
rm -f "$tmp"/caught.*
run -np 2 -H "$h1:1,$h2:1" --server-hosts "$h3:1" --grace-seconds 20 python stepping.py "$tmp" >"$tmp/out" 2>&1 &
job=$!
for _ in $(seq 1 600); do [ "$(grep -c 'step 3$' "$tmp/out")" -ge 2 ] && break; sleep 0.1; done
server=$(for pid in $(pgrep -f -- "--ps-server"); do
  [ "$(ip netns identify "$pid" 2>/dev/null)" = "$(ns 3)" ] && echo "$pid"; done | head -n 1)
start_ms=$(date +%s%3N)
[ -n "$server" ] && kill -9 "$server"
wait "$job"
code=$?
took=$(( $(date +%s%3N) - start_ms ))
for _ in $(seq 1 50); do [ -f "$tmp/caught.0" ] && [ -f "$tmp/caught.1" ] && break; sleep 0.1; done
[ -n "$server" ] && [ "$code" != 0 ] && [ "$took" -lt 10000 ] &&
  grep -q "horarun: parameter server 0 on host $h3 was killed by signal 9" "$tmp/out" &&
  [ "$(cat "$tmp"/caught.* 2>/dev/null | grep -c 'PeerError: parameter server 0 (host')" = 2 ]
check "a server killed on its own host: every rank and horarun name it, and the job ends ($took ms, code $code)" $?
[ "$code" != 0 ] && [ -f "$tmp/caught.1" ] || { tail -n 20 "$tmp/out"; cat "$tmp"/caught.* 2>/dev/null; }

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
