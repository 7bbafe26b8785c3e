"""The load benchmark's machinery (jobs.bench.suites.load) on a handful of tiny images.

The benchmark itself (1,000+ images) is run by hand; see docs/benchmarks.md, "Load".
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from jobs.bench.suites.load import TreeSampler, make_corpus, run_load


def test_generated_corpus_has_the_asked_images(tmp_path):
    what = make_corpus(tmp_path / "c", 5, 16, datasets=None)
    files = sorted((tmp_path / "c").iterdir())
    assert len(files) == 5 and "generated" in what
    shapes = {np.asarray(Image.open(f)).shape for f in files}
    assert shapes == {(16, 16), (16, 16, 3)}


def test_tree_sampler_sees_a_child_that_grows(tmp_path):
    code = "import time; b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"])
    with TreeSampler(parent.pid, interval=0.1) as s:
        parent.wait()
    peaks = s.peaks
    assert peaks.samples >= 3
    # the grandchild (a "python" process) held 80 MB: it counts as a worker, its peak is seen
    assert peaks.worker_python_max_mb > 70
    assert peaks.driver_python_mb > 0


@pytest.mark.spark
@pytest.mark.slow
def test_load_run_reports_throughput_and_peaks(tmp_path):
    s = run_load(tmp_path, images=6, size=16, master="local[2]", driver_memory="512m", preset="addonly-2048",
                 batch_images=4, tile="8x8", datasets=None, interval=0.2)
    assert s["images"] == s["images_encrypted"] == 6
    assert s["ciphertexts"] == 4 * 4 + 2 * 12          # 4 grey + 2 RGB images, 4 tiles each
    assert s["driver_python_mb"] > 0 and s["driver_jvm_mb"] > s["driver_python_mb"] / 10
    assert s["worker_processes"] >= 1 and s["worker_python_max_mb"] > 0
    assert s["ciphertexts_per_second_encrypt"] > 0 and "--batch-images 4" in s["command"]
