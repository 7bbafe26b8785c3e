"""notebooks/results.ipynb runs on a tiny real run (the bench's Spark experiment -- keygen, encrypt, process,
decrypt on local Spark, whose metrics table it reads -- and a tiny bench table),
and the notebooks are stored without outputs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench_tiny import spark_row, tiny_bench

pytestmark = pytest.mark.seconds(60)

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
    spark = spark_row(tmp_path / "spark")
    # The Spark experiment's row: every job's time and the driver's and workers' peak memory per stage.
    for stage in ("encrypt", "op", "decrypt"):
        assert getattr(spark, f"{stage}_seconds") > 0
        assert getattr(spark, f"driver_peak_rss_{stage}") > 50 * 2**20
        assert getattr(spark, f"workers_peak_rss_{stage}") > 10 * 2**20
    assert spark.ssim > 0.99 and spark.reference == "plaintext-processed"
    tiny_bench(tmp_path / "bench-out", [spark])
    from jobs.cli import main
    assert main(["report", "--bench", str(tmp_path / "bench-out"), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split("## The TenSEAL study's brightness +60 on Spark")[1].split("\n## ")[0]
    assert "not measured" not in section and "| process +60 |" in section
    # The kernel is a child process: it inherits these, and runs this interpreter (ipykernel's own spec).
    monkeypatch.setenv("HEPIX_BENCH", str(tmp_path / "bench-out"))
    monkeypatch.setenv("HEPIX_METRICS", str(tmp_path / "spark" / "run" / "dec" / "metrics"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    assert "fig3" in text and "brightness60" in text                # the DuckDB summary of the bench table
    assert "brightness:60" in text                                   # the metrics table's ops
    assert "spark" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)    # the plots
    # Executing in memory never touches the stored notebook.
    assert not any(c.get("outputs") for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
