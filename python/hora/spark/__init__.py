"""hora on Apache Spark: ``hora.spark.run`` (horovod.spark.run) and ``HorovodRunner``
(Databricks'), running each rank as a task of a barrier stage of the active SparkSession.

There is no ``run_elastic``: a barrier stage restarts all of its tasks when one fails, so Spark
cannot keep the surviving ranks while it replaces one (docs/spark_ray.md)."""

from hora.runner import RunError
from hora.spark.horovod_runner import HorovodRunner
from hora.spark.runner import run

__all__ = ["run", "HorovodRunner", "RunError"]
