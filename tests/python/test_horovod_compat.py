"""The opt-in `horovod` compatibility package (python/horovod_compat): installed into a
temporary directory, never into the project's environment, it makes Horovod's names resolve to
hora's objects; it refuses to install over a real Horovod; and scripts written against
Horovod's API run unchanged through `horovodrun` and `horovod.run`.

HORA_HOROVOD_EXAMPLES=DIR (a directory holding some of Horovod's examples pytorch_mnist.py,
pytorch_synthetic_benchmark.py, tensorflow2_synthetic_benchmark.py and
tensorflow2_keras_synthetic_benchmark.py, which hora does not ship) also runs those unchanged.
"""

import glob
import gzip
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPAT = os.path.join(ROOT, "python", "horovod_compat")
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "horovod_scripts")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
BIN = os.path.dirname(sys.executable)


def pip_install(source, target, env=None):
    """pip install --target: the test never touches the project's environment."""
    work = os.path.join(os.path.dirname(target), "src")
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                           "-q", "--target", target, work], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def compat(tmp_path_factory):
    site = str(tmp_path_factory.mktemp("compat") / "site")
    done = pip_install(COMPAT, site)
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]),
               PATH=os.pathsep.join([BIN, os.environ["PATH"]]))
    return site, env


def python(code, env, timeout=120):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_not_installed_by_default():
    spec = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('horovod'))"],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
    assert spec.stdout.strip() == "None", "the project's environment must not have a horovod module"


def test_horovod_names_are_horas_objects(compat):
    _, env = compat
    out = python("""
import sys
import hora.torch, horovod, horovod.torch as hvd
import horovod.torch.mpi_ops, horovod.torch.optimizer, horovod.torch.functions
from horovod.torch.mpi_ops import allreduce_async_, synchronize
from horovod.common.exceptions import HorovodInternalError
assert hvd.allreduce is hora.torch.allreduce and hvd.DistributedOptimizer is hora.torch.DistributedOptimizer
assert horovod.torch.mpi_ops is hora.torch.mpi_ops is sys.modules['horovod.torch.mpi_ops']
assert horovod.torch.optimizer is hora.torch.optimizer and hvd.functions is hora.torch.functions
assert allreduce_async_ is hora.torch.allreduce_async_ and HorovodInternalError is hora.torch.HoraInternalError
missing = [n for n in dir(hora.torch) if not n.startswith('_') and not hasattr(hvd, n)]
assert not missing, missing
print(horovod.__version__)
""", env)
    assert out.strip() == "0.28.1"


def test_horovod_common_util_answers_for_hora(compat):
    """The helpers of horovod.common.util that scripts and Horovod's own test suites import."""
    _, env = compat
    out = python("""
import os
import hora.torch
from horovod.common import util
assert util.is_version_greater_equal_than('2.15.1', '2.12.0') and not util.is_version_greater_equal_than('2.9.0', '2.12.0')
for bad in ((2.15, '2.12.0'), ('2.15.1', '2.12')):
    try:
        util.is_version_greater_equal_than(*bad)
        raise SystemExit(f'no ValueError for {bad}')
    except ValueError:
        pass
assert util.extension_available('horovod.torch') and not util.gpu_available('torch')
assert (util.mpi_built(), util.gloo_built(), util.nccl_built()) == (hora.torch.mpi_built(), hora.torch.gloo_built(),
                                                                     hora.torch.nccl_built())
os.environ['HORA_COMPAT_KEEP'] = 'before'
with util.env(HORA_COMPAT_NEW='1', HORA_COMPAT_KEEP=None):
    assert os.environ['HORA_COMPAT_NEW'] == '1' and 'HORA_COMPAT_KEEP' not in os.environ
assert 'HORA_COMPAT_NEW' not in os.environ and os.environ['HORA_COMPAT_KEEP'] == 'before'
assert [util.num_rank_is_power_2(n) for n in (0, 1, 2, 3, 4, 6, 8)] == [False, True, True, False, True, False, True]
assert util.split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
assert util.is_iterable([1]) and not util.is_iterable(3)
print('ok')
""", env)
    assert out.strip() == "ok"


def test_horovod_tensorflow_is_hora_tensorflow(compat):
    _, env = compat
    out = python("""
import sys
import tensorflow as tf
import hora.tensorflow, horovod.tensorflow, horovod.tensorflow as hvd
from horovod.tensorflow.mpi_ops import allgather
from horovod.tensorflow.functions import broadcast_object
assert hvd.allreduce is hora.tensorflow.allreduce and allgather is hora.tensorflow.allgather
assert horovod.tensorflow.mpi_ops is hora.tensorflow.mpi_ops is sys.modules['horovod.tensorflow.mpi_ops']
assert hvd.HorovodInternalError is hora.tensorflow.HoraInternalError
missing = [n for n in dir(hora.tensorflow) if not n.startswith('_') and not hasattr(hvd, n)]
assert not missing, missing
hvd.init()
print(hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy().tolist(), hora.tensorflow.size())
hvd.shutdown()
""", env | {"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.strip() == "[1.0, 2.0] 1"
def test_horovod_spark_and_ray_are_horas(compat):
    _, env = compat
    python("""
import hora.spark, hora.ray, horovod.spark, horovod.ray
assert horovod.spark.run is hora.spark.run
assert horovod.spark.run_elastic is hora.spark.run_elastic
assert horovod.ray.RayExecutor is hora.ray.RayExecutor and horovod.ray.BaseHorovodWorker is hora.ray.BaseHorovodWorker
from horovod.ray.runner import RayExecutor
from horovod.ray.elastic import ElasticRayExecutor, RayHostDiscovery
from horovod.ray.worker import BaseHorovodWorker
assert RayExecutor is hora.ray.RayExecutor and ElasticRayExecutor is hora.ray.ElasticRayExecutor
assert RayHostDiscovery is hora.ray.RayHostDiscovery and BaseHorovodWorker is hora.ray.BaseHorovodWorker
from horovod.ray import ray_logger
import hora.ray.ray_logger
assert ray_logger is hora.ray.ray_logger
""", env)


def test_horovod_keras_modules_are_horas(compat):
    _, env = compat
    out = python("""
import sys
import hora.keras, hora.tensorflow.keras, horovod.tensorflow.keras as hvd, horovod.keras
import horovod.tensorflow.keras.callbacks, horovod.keras.elastic
from horovod.tensorflow.keras.callbacks import BroadcastGlobalVariablesCallback
assert hvd.DistributedOptimizer is hora.tensorflow.keras.DistributedOptimizer
assert horovod.tensorflow.keras.callbacks is hora.tensorflow.keras.callbacks
assert BroadcastGlobalVariablesCallback is hora.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback
assert horovod.keras.elastic is hora.keras.elastic is sys.modules['horovod.keras.elastic']
assert horovod.keras.PartialDistributedOptimizer is hora.keras.PartialDistributedOptimizer
import hora.tensorflow.elastic, horovod.tensorflow.elastic, horovod.tensorflow.keras.elastic
assert horovod.tensorflow.keras.elastic.TensorFlowKerasState is hora.tensorflow.elastic.TensorFlowKerasState
assert horovod.keras.elastic.TensorFlowKerasState is hora.tensorflow.elastic.TensorFlowKerasState
assert issubclass(hvd.elastic.KerasState, hvd.elastic.TensorFlowKerasState)
assert horovod.tensorflow.elastic.HorovodInternalError is hora.common.exceptions.HoraInternalError
from horovod.common.elastic import ObjectState, run_fn
from horovod.common.process_sets import ProcessSet
import hora.common.elastic, hora.common.process_sets
assert ObjectState is hora.common.elastic.ObjectState and run_fn is hora.common.elastic.run_fn
assert ProcessSet is hora.common.process_sets.ProcessSet
for alias, module in ((hvd, hora.tensorflow.keras), (horovod.keras, hora.keras)):
    missing = [n for n in dir(module) if not n.startswith('_') and not hasattr(alias, n)]
    assert not missing, missing
print('ok')
""", env | {"TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.strip() == "ok"


def test_a_horovod_keras_script_runs_unchanged(compat):
    site, env = compat
    done = subprocess.run([os.path.join(site, "bin", "horovodrun"), "-np", "2", sys.executable,
                           os.path.join(SCRIPTS, "keras_horovod_api.py")],
                          capture_output=True, text=True, env=env | {"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for r in range(2):
        assert (f"[{r}]<stdout>:rank {r}: weights equal rank 0's: True, averaged loss equal on every rank: True"
                in done.stdout), done.stdout[-3000:]


def test_one_state_under_both_names(compat):
    _, env = compat
    out = python("""
import torch, hora.torch, horovod.torch as hvd
hvd.init()
assert hora.torch.is_initialized() and hora.torch.size() == hvd.size() == 1
handle = hvd.allreduce_async(torch.arange(4.0), name='x')
print(hora.torch.synchronize(handle).tolist())
hvd.shutdown()
assert not hora.torch.is_initialized()
""", env)
    assert out.strip() == "[0.0, 1.0, 2.0, 3.0]"


def test_refuses_to_install_over_a_real_horovod(tmp_path):
    fake = tmp_path / "fake" / "horovod-0.28.1.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: horovod\nVersion: 0.28.1\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    done = pip_install(COMPAT, str(tmp_path / "site"), env=env)
    assert done.returncode != 0
    assert "Horovod 0.28.1 is installed" in done.stdout + done.stderr
    assert not os.path.exists(tmp_path / "site" / "horovod")


def test_horovod_run_takes_horovods_arguments(compat, tmp_path):
    _, env = compat
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two slots here\nlocalhost slots=2\n")
    out = python(f"""
import horovod
def job(base):
    import horovod.torch as hvd
    hvd.init()
    return base + hvd.rank()
print('static:', horovod.run(job, args=(10,), num_proc=2))
print('hostfile:', horovod.run(job, kwargs={{'base': 0}}, np=2, hostfile={str(hostfile)!r}, use_gloo=True))
print('elastic:', horovod.run(job, args=(20,), num_proc=2, min_num_proc=1, max_num_proc=2, hosts='localhost:2'))
try:
    horovod.run(job, num_proc=2, network_interface='eth0')
except ValueError as e:
    print('refused:', e)
""", env)
    lines = [line for line in out.splitlines() if not line.startswith("[")]
    assert lines[:3] == ["static: [10, 11]", "hostfile: [0, 1]", "elastic: [20, 21]"], out
    assert lines[3].startswith("refused:") and "network_interface" in lines[3], out


def test_horovodrun_starts_a_job(compat):
    site, env = compat
    done = subprocess.run([os.path.join(site, "bin", "horovodrun"), "-np", "2", sys.executable, "-c",
                           "import horovod.torch as hvd; hvd.init(); print('rank', hvd.rank(), 'of', hvd.size())"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "[0]<stdout>:rank 0 of 2" in done.stdout and "[1]<stdout>:rank 1 of 2" in done.stdout


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """Debian's Fashion-MNIST under the file names torchvision's MNIST loader looks for."""
    if not os.path.isdir(FASHION_MNIST):
        pytest.skip("dataset-fashion-mnist is not installed")
    raw = tmp_path_factory.mktemp("data") / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for path in glob.glob(os.path.join(FASHION_MNIST, "*.gz")):
        with gzip.open(path) as src, open(raw / os.path.basename(path)[:-3], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return str(raw.parent.parent)


@pytest.mark.parametrize("launch", ["horovodrun", "horovod.run"])
def test_a_horovod_training_script_runs_unchanged(compat, mnist_dir, launch):
    pytest.importorskip("torchvision")
    site, env = compat
    script = [os.path.join(SCRIPTS, "mnist_horovod_api.py"), "--data-dir", mnist_dir, "--fp16-allreduce"]
    if launch == "horovodrun":
        command = [os.path.join(site, "bin", "horovodrun"), "-np", "2", sys.executable] + script
    else:
        command = [sys.executable] + script + ["--num-proc", "2"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracy = float(re.search(r"accuracy=([0-9.]+) ranks=2 horovod=0.28.1", done.stdout).group(1))
    assert accuracy > 0.6, done.stdout
    assert done.stdout.count("parameters equal rank 0's: True") == 2, done.stdout


EXAMPLES = os.environ.get("HORA_HOROVOD_EXAMPLES")


@pytest.mark.skipif(not EXAMPLES, reason="set HORA_HOROVOD_EXAMPLES to a directory of Horovod's examples")
@pytest.mark.parametrize("example,arguments,expect", [
    ("pytorch_mnist.py", ["--epochs", "1", "--log-interval", "200"], r"Test set: Average loss: [0-9.]+, Accuracy: "),
    ("pytorch_synthetic_benchmark.py", ["--model", "resnet18", "--batch-size", "4", "--num-warmup-batches", "1",
                                        "--num-batches-per-iter", "2", "--num-iters", "2"], r"Total img/sec on 2 CPU"),
    ("tensorflow2_synthetic_benchmark.py", ["--model", "ResNet50", "--batch-size", "4", "--num-warmup-batches", "1",
                                            "--num-batches-per-iter", "2", "--num-iters", "2", "--fp16-allreduce"],
     r"Total img/sec on 2 GPU"),
    ("tensorflow2_keras_synthetic_benchmark.py", ["--model", "ResNet50", "--batch-size", "4",
                                                  "--num-batches-per-iter", "2", "--num-iters", "2",
                                                  "--fp16-allreduce"], r"Total img/sec on 2 GPU"),
])
def test_horovods_own_examples_run_unchanged(compat, mnist_dir, example, arguments, expect):
    """(The TensorFlow examples say GPU where they run on CPUs: they name the device by --no-cuda.)"""
    if not os.path.exists(os.path.join(EXAMPLES, example)):
        pytest.skip(f"{example} is not in HORA_HOROVOD_EXAMPLES={EXAMPLES}")
    if example.startswith("tensorflow"):
        pytest.importorskip("tensorflow")
    site, env = compat
    if example == "pytorch_mnist.py":
        arguments = arguments + ["--data-dir", mnist_dir]
    done = subprocess.run([os.path.join(site, "bin", "horovodrun"), "-np", "2", sys.executable,
                           os.path.join(EXAMPLES, example)] + arguments,
                          capture_output=True, text=True, env=env, timeout=900, cwd=str(os.path.dirname(mnist_dir)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(expect, done.stdout), done.stdout
