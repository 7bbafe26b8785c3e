"""A tiny but real `hepix bench` table (every experiment of bench.suites.paper, on small images),
shared by tests/test_bench_report.py and tests/test_notebook.py.  Not a test module."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from bench.contexts import Keys
from bench.datasets import sample
from bench.rows import run_columns, write_rows
from bench.schemas import BENCH
from bench.suites import paper
from hecore.images import center_crop, resize
from jobs.runtime import runinfo

BRIGHTNESS60_PRESETS = ("tenseal-8192", "bfv-8192", "bgv-8192")


def tiny_bench(out: Path, extra_rows=()) -> Path:
    """Measure every experiment at toy sizes and write ``out/bench/<run_id>.parquet`` (with ``extra_rows``,
    e.g. :func:`spark_row`'s)."""
    camera, astronaut = sample("camera"), sample("astronaut")
    keys = Keys()
    ctx, _ev = keys.get("paper-4096")
    rows = paper.fig3(ctx, camera, "skimage-camera", (8, 16), ("fresh", "scan", "full"), extrapolate_to=(64,))
    folder = out / "usc"
    folder.mkdir(parents=True)
    files = []
    for name in ("coins", "moon"):
        path = folder / f"{name}.png"
        Image.fromarray(resize(center_crop(sample(name)), 32)).save(path)
        files.append(path)
    rows += paper.fig10(ctx, files, size=32, subset=8, budget_seconds=120.0)
    small = resize(center_crop(astronaut), 16)
    rows += paper.brightness60(keys, [("astronaut@16", small)], BRIGHTNESS60_PRESETS)
    rows += paper.limits(keys, resize(center_crop(camera), 16), "camera@16", ("paper-4096",))
    rows += paper.packed({"astronaut@16": small}, ("paper-4096",), 1)
    rows += list(extra_rows)
    run_id = runinfo.new_run_id()
    common = {**run_columns(run_id), "quick": True, "versions": "{}"}
    return write_rows(rows, BENCH, out / "bench", run_id, common)


def as_rows(path: Path) -> list[dict]:
    import pyarrow.dataset as ds
    return ds.dataset(path, format="parquet").to_table().to_pylist()


def assert_close(a: float, b: float) -> None:
    assert np.isclose(a, b, rtol=1e-9), (a, b)


def spark_row(workdir: Path):
    """The Spark experiment on one generated 32x32 RGB image (kept in ``workdir``: its metrics table is
    ``workdir/dec/metrics``)."""
    src = workdir / "src"
    src.mkdir(parents=True)
    Image.fromarray(resize(center_crop(sample("astronaut")), 48)).save(src / "astronaut.png")
    (row,) = paper.spark_jobs([src / "astronaut.png"], "local[1]", size=32, workdir=workdir / "run")
    return row
