"""hora on Apache Spark: ``hora.spark.run`` (horovod.spark.run) and ``HorovodRunner``
(Databricks'), running each rank as a task of a barrier stage of the active SparkSession, and
``hora.spark.run_elastic`` (horovod.spark.run_elastic), an elastic job whose ranks run in
ordinary Spark tasks, so that the job goes on when one fails (docs/spark_ray.md)."""

from hora.runner import RunError
from hora.spark.elastic import run_elastic
from hora.spark.horovod_runner import HorovodRunner
from hora.spark.runner import run

__all__ = ["run", "run_elastic", "HorovodRunner", "RunError"]
