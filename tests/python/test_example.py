"""The Fashion-MNIST example, reduced to fit CI: 2 workers train the small CNN (without
augmentation) to 85% test accuracy, write a checkpoint and a timeline, and resume from the
checkpoint."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "pytorch", "fashion_mnist.py")
HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")
DATA = "/usr/share/datasets/fashion-mnist"


def train(tmp_path, *extra):
    out = subprocess.run([HORARUN, "-np", "2", sys.executable, EXAMPLE, "--no-progress",
                          "--checkpoint", str(tmp_path / "ck.pt"), *extra],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.mark.skipif(not os.path.isdir(DATA), reason="dataset-fashion-mnist is not installed")
def test_the_example_reaches_the_target_and_resumes(tmp_path):
    timeline = tmp_path / "timeline.json"
    log = train(tmp_path, "--model", "cnn", "--batch-size", "64", "--no-augment", "--epochs", "3",
                "--patience", "1", "--timeline", str(timeline))
    result = re.search(r"RESULT accuracy=(\S+) target=0.85 reached=(\S+)", log)
    assert result and result.group(2) == "yes", log[-3000:]
    assert float(result.group(1)) > 0.85
    assert (tmp_path / "ck.pt").exists()
    events = json.loads(timeline.read_text())
    assert any(e.get("name") == "ALLREDUCE" for e in events)
    epochs_done = len(re.findall(r"\[0\]<stdout>:epoch \d+:", log))
    resumed = train(tmp_path, "--model", "cnn", "--batch-size", "64", "--no-augment", "--train-limit", "6400",
                    "--epochs", str(epochs_done + 1), "--patience", "5", "--resume")
    assert f"resumed from {tmp_path / 'ck.pt'} after epoch {epochs_done}" in resumed
    assert re.search(rf"\[0\]<stdout>:epoch {epochs_done + 1}:", resumed), resumed[-2000:]
    assert not re.search(r"\[0\]<stdout>:epoch 1:", resumed)


@pytest.mark.skipif(not os.path.isdir(DATA), reason="dataset-fashion-mnist is not installed")
def test_the_elastic_example_trains_under_an_elastic_horarun(tmp_path):
    example = os.path.join(ROOT, "examples", "pytorch", "fashion_mnist_elastic.py")
    out = subprocess.run([HORARUN, "-np", "2", "--min-np", "1", "-H", "127.0.0.1:1,127.0.0.2:1", sys.executable,
                          example, "--epochs", "1", "--train-limit", "3200", "--no-augment"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "horarun: generation 0: 2 rank(s)" in out.stderr, out.stderr[-3000:]
    result = re.search(r"RESULT accuracy=(\S+) workers=2", out.stdout)
    assert result and float(result.group(1)) > 0.6, out.stdout[-3000:]
