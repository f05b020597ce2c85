"""hora on Ray: ``RayExecutor`` (horovod.ray's), whose ranks are Ray actors placed by a
placement group. Elastic training on Ray (ElasticRayExecutor, min_workers/max_workers) is not
supported yet (docs/spark_ray.md)."""

from hora.ray.executor import MiniSettings, RayExecutor
from hora.ray.worker import BaseHorovodWorker
from hora.runner import RunError

__all__ = ["RayExecutor", "BaseHorovodWorker", "MiniSettings", "RunError"]
