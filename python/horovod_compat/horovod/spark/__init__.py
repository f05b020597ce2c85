"""horovod.spark is hora.spark: ``horovod.spark.run`` and ``horovod.spark.run_elastic`` with
Horovod's signatures and semantics (hora's docs/spark_ray.md)."""

from hora.spark import run, run_elastic  # noqa: F401
