"""One Spark cluster per test module (a JVM takes seconds to start): `spark`, a local-cluster
master, i.e. a real standalone master with two workers of one core each, each running its
executor in its own JVM, on this host; or `spark_hosts`, a standalone master and two workers
started as their own processes, each bound to an address of its own. The executors run the
ranks with this interpreter."""

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import elastic_jobs  # noqa: E402
import runner_jobs  # noqa: E402

# The executors cannot import the test modules: their functions travel by value.
cloudpickle.register_pickle_by_value(runner_jobs)


@pytest.fixture(scope="module")
def spark(request, tmp_path_factory):
    cloudpickle.register_pickle_by_value(request.module)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # A local-cluster's workers keep each executor's logs and working directory under $SPARK_HOME/work.
    os.environ["SPARK_HOME"] = _spark_home(tmp_path_factory)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local-cluster[2,1,1024]").appName(request.module.__name__)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.executor.memory", "512m").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# A standalone cluster whose two workers are hosts of their own (hora.spark.run_elastic's tests:
# horarun blacklists a failed worker's whole host, so a one-host cluster would lose every rank).
HOST_IPS = ("127.0.0.2", "127.0.0.3")
EXECUTORS_DEADLINE_S = 120


def _spark_home(tmp_path_factory):
    """A SPARK_HOME of links to the pyspark package's entries, so that the workers' logs and
    working directories stay out of the package."""
    import pyspark

    home = tmp_path_factory.mktemp("spark-home")
    package = os.path.dirname(pyspark.__file__)
    for entry in os.listdir(package):
        if entry != "work":
            os.symlink(os.path.join(package, entry), home / entry)
    return str(home)


def _daemon(home, ip, *args):
    """A Spark daemon (master or worker) bound to ``ip``, in a process group of its own, which
    also holds the executors it starts (and their Python workers)."""
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP=ip)
    return subprocess.Popen([os.path.join(home, "bin", "spark-class")] + list(args), env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_executors(sc, count):
    deadline = time.monotonic() + EXECUTORS_DEADLINE_S
    while sc._jsc.sc().getExecutorMemoryStatus().size() < count + 1:  # the driver counts too
        assert time.monotonic() < deadline, f"{count} executors not up after {EXECUTORS_DEADLINE_S} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def spark_hosts(request, tmp_path_factory):
    """A standalone master on 127.0.0.1 and one worker of one core on each of HOST_IPS; the
    session's driver on 127.0.0.1. Yields the SparkSession."""
    from hora._channel import free_port

    cloudpickle.register_pickle_by_value(request.module)
    cloudpickle.register_pickle_by_value(elastic_jobs)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    home = _spark_home(tmp_path_factory)
    os.environ["SPARK_HOME"] = home
    port = free_port("127.0.0.1")
    daemons = [_daemon(home, "127.0.0.1", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                       "--port", str(port), "--webui-port", "0")]
    for ip in HOST_IPS:
        daemons.append(_daemon(home, ip, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                               "--host", ip, "--cores", "1", "--memory", "1g", "--webui-port", "0",
                               "--work-dir", str(tmp_path_factory.mktemp("spark-work"))))
    try:
        from pyspark.sql import SparkSession

        session = (SparkSession.builder.master(f"spark://127.0.0.1:{port}").appName(request.module.__name__)
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.executor.memory", "512m").getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        _wait_for_executors(session.sparkContext, len(HOST_IPS))
        yield session
        session.stop()
    finally:
        for d in daemons:
            os.killpg(d.pid, signal.SIGKILL)
            d.wait(timeout=30)
