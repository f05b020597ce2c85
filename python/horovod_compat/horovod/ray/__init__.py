"""horovod.ray is hora.ray: ``RayExecutor`` (fixed, or elastic with min_workers),
``ElasticRayExecutor`` and ``BaseHorovodWorker`` with horovod.ray's API (hora's docs/spark_ray.md).

Horovod's module names for them are hora's modules too (the module objects themselves), so that
`from horovod.ray.runner import RayExecutor` and `from horovod.ray.elastic import
RayHostDiscovery` work as with Horovod."""

import importlib
import sys

from hora.ray import BaseHorovodWorker, ElasticRayExecutor, RayExecutor  # noqa: F401

for _horovod_name, _hora_module in (("runner", "hora.ray.executor"), ("elastic", "hora.ray.elastic"),
                                    ("worker", "hora.ray.worker"), ("ray_logger", "hora.ray.ray_logger")):
    sys.modules[f"{__name__}.{_horovod_name}"] = importlib.import_module(_hora_module)
    globals()[_horovod_name] = sys.modules[f"{__name__}.{_horovod_name}"]
del _horovod_name, _hora_module
