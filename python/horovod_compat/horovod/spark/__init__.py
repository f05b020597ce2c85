"""horovod.spark is hora.spark: ``horovod.spark.run`` with Horovod's signature and semantics.

``run_elastic`` is absent: a Spark barrier stage restarts all of its tasks when one fails, so it
cannot keep the surviving ranks while one is replaced (hora's docs/spark_ray.md)."""

from hora.spark import run  # noqa: F401
