"""The load benchmark's machinery (bench.suites.load) on a handful of tiny images, and the process-tree
sampler it shares with the corpus suite (bench.proctree): peaks and CPU seconds by role.

The benchmark itself (1,000+ images) is run by hand; see docs/benchmarks.md, "Load".
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from bench.proctree import TreeSampler, cpu_seconds
from bench.suites.load import make_corpus, run_load


def test_generated_corpus_has_the_asked_images(tmp_path):
    what = make_corpus(tmp_path / "c", 5, 16, datasets=None)
    files = sorted((tmp_path / "c").iterdir())
    assert len(files) == 5 and "generated" in what
    shapes = {np.asarray(Image.open(f)).shape for f in files}
    assert shapes == {(16, 16), (16, 16, 3)}


def _sampled_grandchild(code: str) -> TreeSampler:
    """A Python process that starts a Python child running ``code`` (a worker-like grandchild), sampled."""
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"])
    with TreeSampler(parent.pid, interval=0.1) as s:
        parent.wait()
    return s


def test_tree_sampler_sees_a_child_that_grows(tmp_path):
    s = _sampled_grandchild("import time; b = bytearray(80 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
                            "time.sleep(1.5)")
    peaks = s.peaks
    assert peaks.samples >= 3
    # the grandchild (a "python" process) held 80 MB: it counts as a worker, its peak is seen
    assert peaks.worker_python_max_mb > 70
    assert peaks.driver_python_mb > 0


def test_the_tree_sampler_counts_the_cpu_a_grandchild_burns(tmp_path):
    """A worker-like grandchild burns at least 1 CPU second, then idles so a sample sees its final count:
    the sampler counts it, within a loose bound (interpreter start-up adds a little)."""
    p = _sampled_grandchild("import time\nwhile time.process_time() < 1.0: pass\ntime.sleep(0.8)").peaks
    assert 0.95 <= p.worker_python_cpu <= 2.5
    assert p.worker_processes == 1 and p.driver_python_cpu < p.worker_python_cpu
    assert p.driver_jvm_cpu == 0.0


def test_a_shell_that_becomes_the_jvm_counts_as_the_jvm(tmp_path):
    """spark-submit is a shell (its script under .../pyspark/bin) that execs java: the pid is the JVM once it
    runs java, however the shell was named.  A python under the name ``java`` stands in for the JVM."""
    java = tmp_path / "java"
    java.symlink_to(sys.executable)
    burn = "import time; [0 for _ in iter(lambda: time.process_time() < 0.5, False)]; time.sleep(0.6)"
    shell = f"sleep 0.5; exec {shlex.quote(str(java))} -c {shlex.quote(burn)}"
    s = _sampled_grandchild(f"import subprocess; subprocess.run(['sh', '-c', {shell!r}, 'pyspark/bin/spark-submit'])")
    p = s.peaks
    assert p.worker_processes == 1 and p.worker_python_cpu < 0.4          # the middle python only
    assert 0.45 <= p.driver_jvm_cpu <= 2.0 and p.driver_jvm_mb > 0


def test_cpu_seconds_reads_this_process_s_own_time():
    t = time.process_time()
    while time.process_time() - t < 0.3:
        pass
    own = os.times()
    assert abs(cpu_seconds(os.getpid()) - (own.user + own.system)) < 0.1
    assert cpu_seconds(2**22 + 1) is None                    # no such process


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
