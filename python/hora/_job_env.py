"""The environment that makes a process rank r of a hora job without horarun (hora.spark's
Spark tasks, hora.ray's actors): `hvd.init()` in any frontend then joins the job.

Rank 0 serves the rendezvous store itself (HORA_SERVE_STORE, docs/knobs.md) on a port its host
picked, at the address by which the driver reached that host; the others connect there. Local
and cross ranks are derived by hora from HORA_HOSTNAME, which is the host's address: two ranks
share memory exactly when they run on one host."""

import secrets
import time

# After a runner's first rank failed, how long the others get to report their own errors (they
# fail within about a second through hora's own error propagation) before the run raises.
FAILURE_GRACE_SECONDS = 3.0


def grace_left(failed_at):
    """Seconds a runner still waits for more reports, given the time.monotonic() of the first
    failure (None: no failure yet, wait for as long as the job runs)."""
    return None if failed_at is None else max(0.0, failed_at + FAILURE_GRACE_SECONDS - time.monotonic())


def new_secret():
    """The job secret: made on the driver, handed to the ranks in their environment only."""
    return secrets.token_hex(32)


def rank_order(hosts):
    """Given each worker's host (by worker index), the worker indices in rank order: the ranks of
    one host are contiguous, hosts in the order of their first worker, so that worker 0 is rank 0
    and local ranks follow the workers' order on each host (as horovod.spark numbers them)."""
    first = {}
    for index, host in enumerate(hosts):
        first.setdefault(host, index)
    return sorted(range(len(hosts)), key=lambda index: (first[hosts[index]], index))


def rank_environment(rank, size, host, store_host, store_port, secret, iface=None):
    """The HORA_* variables of rank ``rank``; ``store_host:store_port`` is rank 0's."""
    env = {
        "HORA_RANK": str(rank),
        "HORA_SIZE": str(size),
        "HORA_HOSTNAME": host,
        "HORA_RENDEZVOUS_ADDR": store_host,
        "HORA_RENDEZVOUS_PORT": str(store_port),
        "HORA_SECRET": secret,
    }
    if rank == 0:
        env["HORA_SERVE_STORE"] = "1"
    if iface:
        env["HORA_IFACE"] = iface
    return env


def iface_from_nics(nics):
    """Horovod's ``nics`` (a set of interface names) as HORA_IFACE, which names one interface."""
    if not nics:
        return None
    nics = sorted(nics) if not isinstance(nics, str) else [nics]
    if len(nics) > 1:
        raise ValueError(f"nics={nics}: hora uses one network interface (HORA_IFACE); name one")
    return nics[0]
