"""notebooks/results.ipynb runs on a tiny real run (a `hepix demo` metrics table and a tiny bench table),
and the notebooks are stored without outputs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench_tiny import tiny_bench
from jobs.cli import main

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "results.ipynb"


def test_notebooks_are_stored_without_outputs():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "strip_notebooks.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_strip_check_fails_on_a_notebook_with_outputs(tmp_path):
    import nbformat
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    cell.execution_count = 1
    dirty = tmp_path / "dirty.ipynb"
    nbformat.write(nb, dirty)
    check = [sys.executable, str(ROOT / "tools" / "strip_notebooks.py"), "--check", str(dirty)]
    assert subprocess.run(check, capture_output=True).returncode == 1
    assert subprocess.run([sys.executable, str(ROOT / "tools" / "strip_notebooks.py"), str(dirty)]).returncode == 0
    assert subprocess.run(check, capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.spark
def test_results_notebook_runs_on_a_tiny_run(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    demo = tmp_path / "demo"
    assert main(["demo", "--out", str(demo), "--size", "8", "--skip-strategies", "--master", "local[1]"]) == 0
    tiny_bench(tmp_path / "bench-out")
    # The kernel is a child process: it inherits these, and runs this interpreter (ipykernel's own spec).
    monkeypatch.setenv("HEPIX_BENCH", str(tmp_path / "bench-out"))
    monkeypatch.setenv("HEPIX_METRICS", str(demo / "decrypted" / "metrics"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    assert "fig3" in text and "seed001" in text                     # the DuckDB summary of the bench table
    assert "brightness:50" in text                                   # the metrics table's ops
    assert any("image/png" in o.get("data", {}) for o in outputs)    # the plots
    # Executing in memory never touches the stored notebook.
    assert not any(c.get("outputs") for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
