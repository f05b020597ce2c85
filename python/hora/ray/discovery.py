"""Ray's node list as the host discovery of an elastic job (horovod.ray's RayHostDiscovery).

Every alive node is a host named by its IP address (the address hora's ranks use to tell hosts
apart); its slots are how many workers its resources hold: total CPUs // cpus_per_worker, and
with GPUs the smaller of that and total GPUs // gpus_per_worker. Totals, not what is free now,
as Horovod counts: the job's own actors hold the CPUs while it runs, so the executor assumes the
cluster is its own. A node without a slot (a head started with --num-cpus 0) is no host.

hora._elastic_job.HostsFile keeps its answer in the file that horarun's --host-discovery-script
reads, so that horarun's every-second poll costs no Ray call.
"""

import ray


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
