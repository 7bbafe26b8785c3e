"""bench as a package: the suite registry, the one row writer, the data sets' location; which package may
import which."""
from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.command import SUITE_OPTIONS, refuse_unread
from bench.rows import BenchRow, run_columns, write_rows
from bench.schemas import BENCH
from bench.suites import SUITES

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_registered_suite_is_a_module_with_options_and_run(name):
    module_name, help_ = SUITES[name]
    module = importlib.import_module(module_name)
    assert module_name == f"bench.suites.{name}" and help_
    assert set(module.OPTIONS) <= set(SUITE_OPTIONS), module.OPTIONS
    assert callable(module.run)


def test_a_suite_refuses_the_options_it_does_not_read_by_name():
    args = SimpleNamespace(**{o: None for o in SUITE_OPTIONS})
    refuse_unread(args, "pixel", {"sizes"})                     # nothing given: nothing refused
    args.repeats, args.sizes = 3, [8]
    with pytest.raises(SystemExit, match=r"the pixel suite takes only --out, --quick and --sizes, not --repeats$"):
        refuse_unread(args, "pixel", {"sizes"})


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = path.relative_to(ROOT).with_suffix("").parts[:-node.level]
                base = ".".join(parts + ((base,) if base else ()))
            out.append((base, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def test_no_private_name_crosses_a_module_and_the_core_never_imports_the_benchmarks():
    for path in sorted(BENCH_DIR.rglob("*.py")):
        for module, names in _imports(path):
            private = [n for n in names if n.startswith("_") and n != "__future__"]
            assert not private, f"{path.relative_to(ROOT)} imports {private} from {module}"
    for path in sorted((ROOT / "hecore").rglob("*.py")):
        assert not [m for m, _ in _imports(path) if m == "jobs" or m.startswith("jobs.")], path


def test_only_the_bench_and_report_commands_reach_the_benchmarks():
    from jobs.cli import JOBS

    for path in sorted((ROOT / "jobs").rglob("*.py")) + sorted((ROOT / "hecore").rglob("*.py")):
        assert not [m for m, _ in _imports(path) if m == "bench" or m.startswith("bench.")], path
    routed = {name for name, c in JOBS.items() if any(t.startswith("bench.") for t in (c.arguments, c.run))}
    assert routed == {"bench", "report"}


def test_the_workers_code_imports_neither_spark_nor_the_jobs():
    """tasks/ is what Spark's Python workers run (Arrow batches in, Arrow batches or files out, over hecore
    and schemas); jobs/, Spark's driver side, imports it, never the other way."""
    paths = sorted((ROOT / "tasks").rglob("*.py"))
    assert len(paths) > 10
    for path in paths:
        tops = {m.split(".", 1)[0] for m, _ in _imports(path)}
        assert not tops & {"pyspark", "py4j", "jobs", "bench"}, f"{path.relative_to(ROOT)} imports {tops}"


def test_the_command_imports_no_suite_and_no_suite_imports_the_command():
    assert not [m for m, _ in _imports(BENCH_DIR / "command.py") if m.startswith("bench.suites.")]
    for path in sorted((BENCH_DIR / "suites").glob("*.py")):
        assert "bench.command" not in [m for m, _ in _imports(path)], path


@dataclass
class _Row:
    experiment: str
    seconds: float


def test_write_rows_writes_dataclasses_and_mappings_with_the_run_columns(tmp_path):
    common = {**run_columns("r1"), "quick": True}
    path = write_rows([BenchRow(experiment="fig3", seconds=1.5), _Row("limits", 2.0), {"experiment": "packed"}],
                      BENCH, tmp_path / "bench", "r1", common)
    assert path == tmp_path / "bench" / "r1.parquet" and not list((tmp_path / "bench").glob(".*"))
    table = pq.read_table(path)
    assert table.schema.equals(BENCH, check_metadata=False)
    rows = table.to_pylist()
    assert [(r["experiment"], r["seconds"]) for r in rows] == [("fig3", 1.5), ("limits", 2.0), ("packed", None)]
    assert {r["run_id"] for r in rows} == {"r1"} and all(r["quick"] for r in rows)


def test_write_rows_refuses_a_column_the_schema_lacks(tmp_path):
    schema = pa.schema([pa.field("run_id", pa.string()), pa.field("x", pa.int64())])
    with pytest.raises(ValueError, match=r"lacks: \['y'\]"):
        write_rows([{"x": 1, "y": 2}], schema, tmp_path / "t", "r1", {"run_id": "r1"})
    assert not (tmp_path / "t" / "r1.parquet").exists()


def test_datasets_are_read_next_to_the_repository_unless_hepix_datasets_says_otherwise(monkeypatch, tmp_path):
    import bench.datasets as datasets
    try:
        monkeypatch.delenv("HEPIX_DATASETS", raising=False)
        importlib.reload(datasets)
        assert datasets.DATASETS == ROOT.parent / "shared" / "datasets"
        monkeypatch.setenv("HEPIX_DATASETS", str(tmp_path))
        importlib.reload(datasets)
        assert datasets.DATASETS == tmp_path
        assert datasets.usc_sipi_files() == [] and datasets.div2k_files() == []
        images = datasets.packed_images(2, 16)            # no data sets: scikit-image's samples
        assert list(images) == ["skimage-camera@16", "skimage-astronaut@16"]
        assert all(img.shape[:2] == (16, 16) for img in images.values())
    finally:
        monkeypatch.undo()
        importlib.reload(datasets)


def test_datasets_is_defined_once():
    defined = [p for p in BENCH_DIR.rglob("*.py") if re.search(r"^DATASETS\b.*=", p.read_text(), re.MULTILINE)]
    assert defined == [BENCH_DIR / "datasets.py"]
