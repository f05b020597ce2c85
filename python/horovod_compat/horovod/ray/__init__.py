"""horovod.ray is hora.ray: ``RayExecutor`` (fixed, or elastic with min_workers),
``ElasticRayExecutor`` and ``BaseHorovodWorker`` with horovod.ray's API (hora's docs/spark_ray.md)."""

from hora.ray import BaseHorovodWorker, ElasticRayExecutor, RayExecutor  # noqa: F401
