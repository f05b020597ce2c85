"""One Spark cluster per test module (a JVM takes seconds to start): a local-cluster master,
i.e. a real standalone master with two workers of one core each, each running its executor
in its own JVM, on this host. The executors run the ranks with this interpreter."""

import os
import sys

import cloudpickle
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import runner_jobs  # noqa: E402

# The executors cannot import the test modules: their functions travel by value.
cloudpickle.register_pickle_by_value(runner_jobs)


@pytest.fixture(scope="module")
def spark(request, tmp_path_factory):
    cloudpickle.register_pickle_by_value(request.module)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # A local-cluster's workers keep each executor's logs and working directory under
    # $SPARK_HOME/work: a SPARK_HOME of links to the pyspark package's entries keeps them out of it.
    import pyspark

    home = tmp_path_factory.mktemp("spark-home")
    package = os.path.dirname(pyspark.__file__)
    for entry in os.listdir(package):
        if entry != "work":
            os.symlink(os.path.join(package, entry), home / entry)
    os.environ["SPARK_HOME"] = str(home)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local-cluster[2,1,1024]").appName(request.module.__name__)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.executor.memory", "512m").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
