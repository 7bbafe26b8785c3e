"""`hepix bench` as a user runs it: the installed command, from a plain shell in a directory of its own, with no
PYTHONPATH and nothing of pytest's.  Every suite's module imports that way (the cluster suites included, whose
smallest form needs a cluster), and the suites whose smallest form takes seconds run it and write their table."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.suites import SUITES

pytestmark = [pytest.mark.seconds(40)]

HEPIX = Path(sys.executable).with_name("hepix")
#: The suites whose ``--quick`` form takes seconds here, and the table each writes.
QUICK = {"atrest": "bench_atrest", "integrity": "bench_integrity", "dft": "bench_dft", "infer": "bench_infer"}


def plain_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON", "COV_"))}
    env["PATH"] = f"{HEPIX.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def shell(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=plain_env(), capture_output=True, text=True,
                          timeout=timeout)


def test_every_suite_imports_from_a_plain_shell(tmp_path):
    modules = sorted({module for module, _help in SUITES.values()})
    code = "; ".join(f"import {m}" for m in modules) + "; print('ok')"
    r = shell(f"'{HEPIX.with_name('python')}' -c \"{code}\"", tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


@pytest.mark.parametrize("suite", sorted(QUICK))
def test_the_smallest_form_runs_from_a_plain_shell(tmp_path, suite):
    r = shell(f"hepix bench --suite {suite} --quick --out out", tmp_path)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    (table,) = (tmp_path / "out" / QUICK[suite]).glob("*.parquet")
    assert pq.read_table(table).num_rows > 0 and "Traceback" not in r.stderr
