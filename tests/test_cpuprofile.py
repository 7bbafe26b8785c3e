"""The test run's CPU profile (tests/cpuprofile.py): a child's CPU counts in its parent's tree, and the summary
sums the tests by file, largest first, against the machine's busy CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import cpuprofile
import pytest

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads /proc")


def test_a_child_s_cpu_counts_in_the_tree_while_it_lives():
    before = cpuprofile.tree_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c",
                              "import time, sys\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
                              "print('done', flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "done"
        spent = cpuprofile.tree_cpu(os.getpid()) - before
        assert spent >= 0.4, spent
        assert cpuprofile.tree_cpu(child.pid) >= 0.4
    finally:
        child.kill()
        child.wait()


def test_the_summary_sums_the_tests_by_file_largest_first(tmp_path):
    records = [("tests/test_a.py::x", 1.5, 2.0), ("tests/test_b.py::y", 4.0, 5.0), ("tests/test_a.py::z", 1.0, 1.0)]
    for n, (test, cpu, wall) in enumerate(records):
        with open(tmp_path / f"cpu-{n % 2}.jsonl", "a") as f:
            f.write(json.dumps({"test": test, "cpu_s": cpu, "wall_s": wall}) + "\n")
    (tmp_path / "machine.json").write_text(json.dumps({"busy_cpu_s": 13.0, "wall_s": 9.0}))
    lines = cpuprofile.summary(tmp_path).splitlines()
    assert lines[1].split() == ["4.0", "5.0", "1", "tests/test_b.py"]
    assert lines[2].split() == ["2.5", "3.0", "2", "tests/test_a.py"]
    assert lines[3].split()[:2] == ["6.5", "3"]
    assert lines[4].endswith("account for 50%")


def test_the_machine_s_busy_cpu_grows_with_work():
    start = cpuprofile.machine_busy()
    t = time.process_time()
    while time.process_time() - t < 0.3:
        pass
    assert cpuprofile.machine_busy() - start >= 0.25
