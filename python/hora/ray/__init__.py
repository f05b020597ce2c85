"""hora on Ray: ``RayExecutor`` (horovod.ray's), whose ranks are Ray actors placed by a
placement group, or with ``min_workers`` an elastic job on Ray's nodes; and
``ElasticRayExecutor`` (horovod.ray's older elastic API); ``ray_logger.log`` sends a worker's
items to the driver's callbacks. docs/spark_ray.md.

The names are imported on first use, so that importing a submodule does not pay for importing
Ray where it is not needed."""

import importlib

_WHERE = {
    "RayExecutor": "hora.ray.executor",
    "MiniSettings": "hora.ray.executor",
    "BaseHorovodWorker": "hora.ray.worker",
    "ElasticRayExecutor": "hora.ray.elastic",
    "RayHostDiscovery": "hora.ray.discovery",
    "RunError": "hora.runner",
}

__all__ = list(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module 'hora.ray' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
