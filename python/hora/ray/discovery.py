"""Ray's node list as the host discovery of an elastic job (horovod.ray's RayHostDiscovery).

Every alive node is a host named by its IP address (the address hora's ranks use to tell hosts
apart); its slots are how many workers its resources hold: total CPUs // cpus_per_worker, and
with GPUs the smaller of that and total GPUs // gpus_per_worker. Totals, not what is free now,
as Horovod counts: the job's own actors hold the CPUs while it runs, so the executor assumes the
cluster is its own. A node without a slot (a head started with --num-cpus 0) is no host.

HostsFile keeps the discovery's answer in a file that horarun's --host-discovery-script reads
(``cat``), refreshed by one thread, so that horarun's every-second poll costs no Ray call.
"""

import logging
import os
import tempfile
import threading

import ray

log = logging.getLogger("hora.ray")

# How often HostsFile asks Ray (horarun reads the file every second).
REFRESH_S = 0.5


class RayHostDiscovery:
    def __init__(self, use_gpu=False, cpus_per_worker=1, gpus_per_worker=1):
        self.use_gpu = use_gpu
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker or 1

    def find_available_hosts_and_slots(self):
        """{node IP: slots} of the alive nodes with at least one slot. Several nodes with one
        IP (one machine) add up."""
        hosts = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            resources = node.get("Resources", {})
            slots = int(resources.get("CPU", 0) // self.cpus_per_worker)
            if self.use_gpu:
                slots = min(slots, int(resources.get("GPU", 0) // self.gpus_per_worker))
            if slots > 0:
                host = node["NodeManagerAddress"]
                hosts[host] = hosts.get(host, 0) + slots
        return hosts


def hosts_text(hosts):
    """horarun's discovery format: ``host:slots`` per line."""
    return "".join(f"{host}:{slots}\n" for host, slots in hosts.items())


class HostsFile:
    """The discovery's answer in a file, rewritten (atomically, by rename) every REFRESH_S by a
    daemon thread until close(). A discovery that raises leaves the last answer in place."""

    def __init__(self, discovery, directory):
        self._discovery = discovery
        self.path = os.path.join(directory, "hosts")
        self._stop = threading.Event()
        self.refresh()  # the first answer is there before horarun reads it
        self._thread = threading.Thread(target=self._loop, name="hora-ray-discovery", daemon=True)
        self._thread.start()

    def refresh(self):
        hosts = self._discovery.find_available_hosts_and_slots()
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".hosts")
        with os.fdopen(fd, "w") as f:
            f.write(hosts_text(hosts))
        os.replace(tmp, self.path)
        return hosts

    def _loop(self):
        while not self._stop.wait(REFRESH_S):
            try:
                self.refresh()
            except Exception as e:  # Ray's GCS unreachable for a moment: keep the last answer
                log.warning("hora.ray: host discovery failed (%s: %s); keeping the last host list", type(e).__name__, e)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
