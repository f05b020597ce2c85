"""One Ray cluster per test module: a head started by ray.init with two CPUs (its own GCS,
raylet and worker processes), shut down after the module."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import runner_jobs  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster(request, tmp_path_factory):
    import ray
    import ray.cloudpickle

    # The actors cannot import the test modules: their functions travel by value.
    ray.cloudpickle.register_pickle_by_value(runner_jobs)
    ray.cloudpickle.register_pickle_by_value(request.module)
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()
