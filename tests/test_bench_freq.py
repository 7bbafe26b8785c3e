"""hepix bench --suite dft / infer: tiny configurations end to end, the rows against the schemas."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from jobs.bench.suites import dft as bench_dft
from jobs.bench.suites import infer as bench_infer
from jobs.cli import main
from schemas.bench import BENCH_DFT, BENCH_INFER, BENCH_TABLES

pytest.importorskip("sklearn")


def test_dft_suite(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_dft, "QUICK", ((64, "dft-8192", "fold", 2), (16, "dft-8192", "three", 1)))
    monkeypatch.setattr("jobs.bench.freq._one_core", lambda: 1)       # leave the test process's cores alone
    assert main(["bench", "--suite", "dft", "--quick", "--out", str(tmp_path)]) == 0
    (path,) = (tmp_path / "bench_dft").glob("*.parquet")
    t = pq.read_table(path)
    assert BENCH_TABLES["bench_dft"] is BENCH_DFT and t.schema.remove_metadata().equals(BENCH_DFT)
    rows = t.to_pylist()
    assert [r["n"] for r in rows] == [64, 16]
    for r in rows:
        assert 0 < r["max_abs_err"] < 0.01 and r["rel_err"] < 1e-4
        assert r["seed_seconds"] == bench_dft.SEED_SECONDS[r["n"]]
        assert r["speedup_vs_seed"] == pytest.approx(r["seed_seconds"] / r["pipeline_seconds"])


def test_infer_suite(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_infer, "QUICK", (("logreg", "01", "paper-4096", True), ("logreg", "01", "bfv-4096", False)))
    monkeypatch.setattr("jobs.bench.freq._one_core", lambda: 1)
    assert main(["bench", "--suite", "infer", "--quick", "--out", str(tmp_path)]) == 0
    (path,) = (tmp_path / "bench_infer").glob("*.parquet")
    t = pq.read_table(path)
    assert t.schema.remove_metadata().equals(BENCH_INFER)
    rows = t.to_pylist()
    assert [(r["scheme"], r["layout"]) for r in rows] == [("ckks", "block-128"), ("bfv", "pixel-per-ciphertext")]
    for r in rows:
        assert r["samples"] == 108 and r["accuracy_encrypted"] == r["accuracy_plain"] == 1.0
        assert r["bytes_per_sample"] == r["ciphertext_bytes"] / 108
        assert r["seed_samples_per_second"] in (80.87, 391.64)


def test_suites_take_only_out_and_quick(tmp_path):
    with pytest.raises(SystemExit, match="dft suite .* --preset"):
        main(["bench", "--suite", "dft", "--preset", "paper-4096", "--out", str(tmp_path)])
