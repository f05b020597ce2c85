"""Where RayExecutor's actors go (horovod.ray's strategies): one placement group per job.

``num_workers=N``: N bundles of one worker's resources, packed onto as few nodes as fit (PACK).
``num_hosts=H, num_workers_per_host=W``: H bundles of W workers' resources on H distinct nodes
(STRICT_SPREAD), each host's workers in its bundle. A group that cannot be placed within
``timeout_s`` raises TimeoutError naming what it asked for, and is removed.
"""

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def worker_resources(cpus_per_worker, gpus_per_worker):
    resources = {"CPU": cpus_per_worker}
    if gpus_per_worker:
        resources["GPU"] = gpus_per_worker
    return resources


def create(num_workers, num_hosts, num_workers_per_host, resources, timeout_s):
    """Returns (placement group, bundle index of each worker)."""
    if num_hosts is None:
        bundles, strategy = [dict(resources) for _ in range(num_workers)], "PACK"
        bundle_of = list(range(num_workers))
    else:
        bundles = [{k: v * num_workers_per_host for k, v in resources.items()} for _ in range(num_hosts)]
        strategy = "STRICT_SPREAD"
        bundle_of = [h for h in range(num_hosts) for _ in range(num_workers_per_host)]
    group = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(
            f"RayExecutor: the cluster could not place {len(bundles)} bundles of {bundles[0]} ({strategy}) within "
            f"placement_group_timeout_s={timeout_s:g} s; available: {ray.available_resources()}")
    return group, bundle_of


def scheduling(group, bundle_index):
    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=bundle_index)


def remove(group):
    remove_placement_group(group)
