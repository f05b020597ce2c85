"""horovod.ray is hora.ray: ``RayExecutor`` and ``BaseHorovodWorker`` with horovod.ray's API.

``ElasticRayExecutor`` and RayExecutor's elastic arguments (min_workers, max_workers) are not
supported yet (hora's docs/spark_ray.md)."""

from hora.ray import BaseHorovodWorker, RayExecutor  # noqa: F401
