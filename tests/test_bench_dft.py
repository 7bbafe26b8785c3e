"""hepix bench --suite dft: tiny configurations end to end, the rows against the schema and the paper."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from bench import seeds
from bench.schemas import BENCH_DFT, BENCH_TABLES
from bench.suites import dft as bench_dft
from jobs.cli import main


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-dft")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_dft, "QUICK", ((64, "dft-8192", "fold", 2), (16, "dft-8192", "three", 1)))
        mp.setattr(bench_dft, "pin_one_core", lambda: 1)       # leave the test process's cores alone
        assert main(["bench", "--suite", "dft", "--quick", "--out", str(out)]) == 0
    (path,) = (out / "bench_dft").glob("*.parquet")
    t = pq.read_table(path)
    assert BENCH_TABLES["bench_dft"] is BENCH_DFT and t.schema.remove_metadata().equals(BENCH_DFT)
    return t.to_pylist()


def test_dft_suite_rows_and_their_errors(rows):
    assert [r["n"] for r in rows] == [64, 16]
    for r in rows:
        assert 0 < r["max_abs_err"] < 0.01 and r["rel_err"] < 1e-4


def test_the_paper_figure_is_costache_smart_vivek_table_3(rows):
    for r in rows:
        figure = seeds.DFT_SECONDS[r["n"]]
        assert r["seed_seconds"] == figure.value
        assert figure.paper is seeds.DFT_PAPER and figure.where == "Table 3"


def test_end_to_end_is_every_stage_but_keygen_and_at_least_the_pipeline(rows):
    for r in rows:
        parts = r["build_seconds"] + r["encrypt_seconds"] + r["pipeline_seconds"] + r["decrypt_seconds"]
        assert r["end_to_end_seconds"] == pytest.approx(parts)
        assert r["end_to_end_seconds"] >= r["pipeline_seconds"] >= r["encode_seconds"] > 0
        assert r["keygen_seconds"] > 0 and math.isfinite(r["keygen_seconds"])


def test_the_ratio_to_the_paper_comes_from_the_end_to_end_time(rows):
    for r in rows:
        assert r["speedup_vs_seed"] == pytest.approx(r["seed_seconds"] / r["end_to_end_seconds"])


def test_suites_take_only_out_and_quick(tmp_path):
    with pytest.raises(SystemExit, match="dft suite .* --preset"):
        main(["bench", "--suite", "dft", "--preset", "paper-4096", "--out", str(tmp_path)])
    assert not (tmp_path / "bench_dft").exists()
