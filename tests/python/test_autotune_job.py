"""Autotuning end to end: horovodrun's --autotune flags on horarun, a hora.torch job whose
gradients stay right while the parameters change under it, and the log's format."""

import csv
import os
import subprocess
import sys
import textwrap

HORARUN = os.environ.get("HORA_HORARUN") or os.path.join(os.path.dirname(sys.executable), "horarun")

SCRIPT = textwrap.dedent("""
    import numpy, torch
    import hora.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    sizes = [3, 1000, 70000, 5, 300000, 17]
    for step in range(400):
        handles = []
        for i, size in enumerate(sizes):
            t = torch.full((size,), float((r + 1) * (i + step + 1)))
            handles.append((i, hvd.allreduce_async(t, name="grad.%d" % i, op=hvd.Sum)))
        for i, h in handles:
            got = hvd.synchronize(h).numpy()
            want = numpy.full(sizes[i], (i + step + 1) * n * (n + 1) / 2.0, dtype=numpy.float32)
            numpy.testing.assert_array_equal(got, want)
    print("rank %d ok" % r, flush=True)
""")


def test_horarun_autotune_flags_tune_a_job_and_log_every_sample(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    log = tmp_path / "autotune.csv"
    out = subprocess.run([HORARUN, "-np", "2", "--autotune", "--autotune-log-file", str(log),
                          "--autotune-warmup-samples", "2", "--autotune-steps-per-sample", "4",
                          "--autotune-bayes-opt-max-samples", "12", "--fusion-threshold-mb", "1",
                          "-x", "HORA_STALL_SHUTDOWN_TIME_SECONDS=60", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 ok" in out.stdout and "rank 1 ok" in out.stdout
    rows = list(csv.reader(log.open()))
    assert rows[0] == ["hierarchical_allreduce", "hierarchical_allgather", "cache_enabled", "cycle_time_ms",
                       "tensor_fusion_threshold", "ring_threshold", "bucket_bytes", "score"]
    samples, best = rows[1:-1], rows[-1]
    assert len(samples) == 12, rows
    # The first sample is the starting point: the defaults (one host: no hierarchy to choose).
    assert samples[0][:7] == ["auto", "auto", "1", "1", "1", "4096", "1048576"], samples[0]
    for row in samples + [best]:
        assert row[:2] == ["auto", "auto"], row          # one host: the hierarchical choices are not tuned
        assert row[4] == "1", row                          # --fusion-threshold-mb 1 stays fixed
        assert row[2] in ("0", "1") and float(row[3]) >= 0 and float(row[7]) > 0, row
    assert len({tuple(r[:7]) for r in samples}) > 6, "the search did not move"
    # The last row repeats the sample kept, with its score.
    assert best in samples, best
