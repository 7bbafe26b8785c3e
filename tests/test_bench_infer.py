"""hepix bench --suite infer: tiny configurations end to end; one sample alone next to the batch,
each against the matching figure of the paper."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from bench import seeds
from bench.schemas import BENCH_INFER, BENCH_TABLES
from bench.suites import infer as bench_infer
from jobs.cli import main

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-infer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_infer, "QUICK", (("logreg", "01", "paper-4096", "auto"), ("logreg", "01", "bfv-4096", "auto")))
        mp.setattr(bench_infer, "pin_one_core", lambda: 1)
        assert main(["bench", "--suite", "infer", "--quick", "--out", str(out)]) == 0
    (path,) = (out / "bench_infer").glob("*.parquet")
    t = pq.read_table(path)
    assert BENCH_TABLES["bench_infer"] is BENCH_INFER and t.schema.remove_metadata().equals(BENCH_INFER)
    return t.to_pylist()


def test_infer_suite_batches(rows):
    # the chooser's layouts for the 108 test digits: the batch layouts (one sample per ciphertext would cost more)
    assert [(r["scheme"], r["layout"], r["layout_requested"]) for r in rows] == [
        ("ckks", "block-128", "auto"), ("bfv", "pixel-per-ciphertext", "auto")]
    for r in rows:
        assert r["samples"] == 108 and r["accuracy_encrypted"] == r["accuracy_plain"] == 1.0
        assert r["bytes_per_sample"] == r["ciphertext_bytes"] / 108
        assert r["seed_samples_per_second"] in (80.87, 391.64)


def test_one_sample_alone_is_measured_end_to_end(rows):
    for r in rows:
        assert math.isfinite(r["single_sample_ms"]) and r["single_sample_ms"] > 0
        assert r["single_sample_ms"] >= r["single_sample_infer_ms"] > 0
        assert bench_infer.QUICK_SINGLE_REPEATS <= r["single_sample_repeats"] <= bench_infer.SINGLE_MAX
        assert r["single_sample_speedup"] == pytest.approx(r["single_sample_baseline_ms"] / r["single_sample_ms"])
    # one sample: one ciphertext with the pixels as coefficients; beside it, the batch's layout with one sample
    assert [r["single_sample_layout"] for r in rows] == ["coefficients", "coefficients"]
    assert [r["single_sample_baseline_layout"] for r in rows] == ["block-1", "pixel-per-ciphertext"]


def test_each_figure_meets_the_paper_figure_of_its_kind(rows):
    for r in rows:
        paper = seeds.INFERENCE[(r["model"], r["scheme"])]
        assert r["seed_ms_per_sample"] == paper.latency_ms.value
        assert r["seed_samples_per_second"] == paper.samples_per_second.value
        # latency: the paper's per-sample figure against one sample alone, not the batch's amortised ms
        assert r["latency_vs_seed"] == pytest.approx(r["seed_ms_per_sample"] / r["single_sample_ms"])
        # throughput: the paper's samples/s against the batch's end-to-end rate
        assert r["throughput_vs_seed"] == pytest.approx(r["end_to_end_samples_per_second"] / r["seed_samples_per_second"])
        assert r["ms_per_sample"] == pytest.approx(1000 / r["end_to_end_samples_per_second"])


def test_the_all_task_has_no_paper_figure():
    (m,) = bench_infer.run_infer_bench((("logreg", "all", "paper-4096", "auto"),), single_repeats=1)
    assert m.seed_ms_per_sample is None and m.latency_vs_seed is None and m.throughput_vs_seed is None
    assert m.single_sample_ms > 0 and m.classes == 10
