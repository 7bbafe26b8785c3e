"""`hepix bench` (the `bench` table of every experiment) and `hepix report` (plots and Markdown from it)."""
from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bench_tiny import as_rows, tiny_bench

from jobs.bench.command import _resolve_suite
from jobs.bench.peakmem import PeakMeter, reset_peak
from jobs.bench.report import load_rows, render
from jobs.cli import main
from schemas.bench import BENCH

EXPERIMENTS = {"fig3", "fig10", "seed001", "limits", "packed"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    path = tiny_bench(out)
    return out, path, as_rows(path)


@pytest.fixture(scope="module")
def report(bench, tmp_path_factory):
    out, _path, _rows = bench
    rep = tmp_path_factory.mktemp("report")
    assert main(["report", "--bench", str(out), "--out", str(rep)]) == 0
    return rep, (rep / "report.md").read_text()


def test_the_table_has_the_bench_schema_and_every_experiment(bench):
    _out, path, rows = bench
    assert pq.read_schema(path).equals(BENCH, check_metadata=False)
    assert {r["experiment"] for r in rows} == EXPERIMENTS


def test_measured_rows_carry_stage_times_and_peak_memory(bench):
    rows = [r for r in bench[2] if r["experiment"] in ("fig3", "fig10", "seed001") and r["encrypt_seconds"] is not None]
    assert rows
    for r in rows:
        assert r["encrypt_seconds"] > 0 and r["decrypt_seconds"] > 0
        assert r["driver_peak_rss_encrypt"] > 10 * 2**20 and r["driver_peak_rss_decrypt"] > 10 * 2**20
        assert r["workers_peak_rss_encrypt"] is None      # one process: no workers
    for r in (r for r in rows if r["experiment"] == "seed001"):
        assert r["op_seconds"] > 0 and r["driver_peak_rss_op"] > 10 * 2**20


def test_extrapolated_rows_are_marked_and_follow_from_the_measured_rate(bench):
    rows = bench[2]
    fig3 = [r for r in rows if r["experiment"] == "fig3"]
    assert {r["size"] for r in fig3 if r["extrapolated"]} == {64}
    assert not any(r["extrapolated"] for r in fig3 if r["size"] in (8, 16))
    for r in (r for r in fig3 if r["extrapolated"]):
        assert r["mse"] is None and r["encrypt_seconds"] is None
        assert math.isclose(r["seconds"], r["pixels"] / r["pixels_per_second"])
        base = next(b for b in fig3 if b["size"] == 16 and b["layout"] == r["layout"] and b["strategy"] == r["strategy"])
        assert r["pixels_per_second"] == base["pixels_per_second"]
    for r in (r for r in rows if r["experiment"] == "fig10"):
        assert r["extrapolated"] and r["pixels_measured"] == 64 and r["pixels"] == 32 * 32


def test_speedups_are_ratios_to_fresh_on_the_same_image(bench):
    fig3 = [r for r in bench[2] if r["experiment"] == "fig3" and not r["extrapolated"] and r["layout"] == "pixel"]
    for r in fig3:
        fresh = next(f for f in fig3 if f["size"] == r["size"] and f["strategy"] == "fresh")
        assert math.isclose(r["speedup_vs_fresh"], fresh["encrypt_seconds"] / r["encrypt_seconds"])
    assert {r["security"] for r in fig3 if r["strategy"] != "fresh"} == {"leaks"}


def test_seed001_scores_against_the_plaintext_result_per_scheme(bench):
    seed = [r for r in bench[2] if r["experiment"] == "seed001"]
    assert sorted(r["scheme"] for r in seed) == ["bfv", "bgv", "ckks"]
    for r in seed:
        assert r["reference"] == "plaintext-processed" and r["ops"] == "brightness:60"
        assert r["ssim"] > 0.99 and r["exact_fraction"] > 0.99
    assert all(r["mse"] == 0 for r in seed if r["scheme"] in ("bfv", "bgv"))


def test_limits_split_the_packed_time(bench):
    lim = [r for r in bench[2] if r["experiment"] == "limits"]
    assert any(r["implementation"] == "numpy-memcpy" and r["bytes_per_second"] > 1e8 for r in lim)
    packed = [r for r in lim if r["layout"] == "packed"]
    assert packed and all(r["encode_seconds"] > 0 and r["encrypt_seconds"] > 0 and r["serialize_seconds"] > 0
                          for r in packed)


def test_report_fills_every_section_and_draws_the_plots(report):
    rep, md = report
    for png in ("fig3.png", "fig10.png", "seed001.png", "limits.png"):
        assert (rep / png).stat().st_size > 1000
    for title in ("Fig. 3", "Table 2", "Fig. 10", "seed 001", "Physical limits", "Packed layout"):
        assert title in md
    # Only the secure fast path (absent from this table), TFHE and the Spark run may be missing
    missing = [line for line in md.splitlines() if "not measured" in line]
    # (the Spark experiment is in tests/test_notebook.py's table, not this one's).
    assert all("symmetric fast path" in line or "TFHE" in line or "Spark step" in line for line in missing), missing
    assert "concrete-python" in md


def test_headline_figures_are_the_table_s(bench, report):
    rows, md = bench[2], report[1]
    full = [r["speedup_vs_fresh"] for r in rows if r["experiment"] == "fig3" and not r["extrapolated"]
            and r["layout"] == "pixel" and r["strategy"] == "full"]
    line = next(l for l in md.splitlines() if l.startswith("| full over fresh, best size"))
    assert f"| {max(full):.2f} |" in line
    f10 = [r["speedup_vs_fresh"] for r in rows if r["experiment"] == "fig10" and r["strategy"] == "full"]
    line = next(l for l in md.splitlines() if l.startswith("| full over fresh, average"))
    assert f"| {np.mean(f10):.2f} |" in line and "over 2 USC-SIPI" in line
    ckks = next(r for r in rows if r["experiment"] == "seed001" and r["scheme"] == "ckks")
    line = next(l for l in md.splitlines() if l.startswith("| seed 001 CKKS SSIM"))
    assert f"| {ckks['ssim']:.4f} |" in line


def _rewrite(bench, tmp_path, edit, name="edited"):
    df = edit(load_rows(bench[0]))
    (tmp_path / name / "bench").mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(df, schema=BENCH, preserve_index=False),
                   tmp_path / name / "bench" / "x.parquet")
    return render(load_rows(tmp_path / name), tmp_path / name / "rep").read_text()


def test_the_report_picks_up_any_packed_encryption_variant(bench, tmp_path):
    import pandas as pd

    def public_only(df):
        return df[~(df.implementation.fillna("").str.startswith("hepix-packed") & (df.encryption != "public"))]

    def relabel(df):
        df = public_only(df)
        extra = df[(df.experiment == "packed") & (df.implementation == "hepix-packed")].copy()
        extra["encryption"] = "symmetric-seeded"
        return pd.concat([df, extra], ignore_index=True)

    md = _rewrite(bench, tmp_path, relabel, "with")
    assert "Secure fast path (symmetric-seeded): measured above." in md
    assert re.search(r"\| hepix-packed \| paper-4096 \| symmetric-seeded \|", md)
    md = _rewrite(bench, tmp_path, public_only, "without")
    assert "symmetric fast path of the packed layout: **not measured**" in md


def test_missing_experiments_say_not_measured(bench, tmp_path):
    md = _rewrite(bench, tmp_path, lambda df: df[~df.experiment.isin(["seed001", "fig10"])])
    assert "## seed 001" in md and "**not measured** (no DIV2K images found)" in md
    assert "**not measured** (no USC-SIPI images found)" in md


def test_report_refuses_an_unknown_run(bench, tmp_path):
    with pytest.raises(SystemExit, match="not in"):
        main(["report", "--bench", str(bench[0]), "--out", str(tmp_path), "--run", "nope"])


def test_peak_meter_sees_an_allocation_in_its_stage():
    meter = PeakMeter()
    with meter.stage("encrypt"):
        block = np.ones(200 * 2**20, dtype=np.uint8)
        del block
    with meter.stage("decrypt"):
        pass
    enc, dec = meter.stages["encrypt"], meter.stages["decrypt"]
    assert enc.driver >= 200 * 2**20
    if reset_peak():
        assert dec.driver < enc.driver - 100 * 2**20
    assert set(meter.as_columns()) == {"driver_peak_rss_encrypt", "workers_peak_rss_encrypt",
                                       "driver_peak_rss_decrypt", "workers_peak_rss_decrypt"}


def test_peak_meter_counts_child_processes_as_workers():
    import subprocess
    import sys
    meter = PeakMeter(children=True, interval=0.02)
    with meter.stage("op"):
        subprocess.run([sys.executable, "-c", "import time; b = bytearray(80 * 2**20); time.sleep(0.5)"], check=True)
    assert meter.stages["op"].workers >= 80 * 2**20


@pytest.mark.parametrize("given, suite", [
    ({}, "all"), ({"sizes": "8"}, "pixel"), ({"preset": "addonly-2048"}, "pixel"), ({"suite": "ops"}, "ops"),
])
def test_the_default_suite_is_all_unless_a_pixel_option_is_given(given, suite):
    from jobs.bench.suites.pixel import DEFAULT_SIZES, DEFAULT_STRATEGIES, DEFAULT_TILE
    args = SimpleNamespace(suite=None, sizes=",".join(map(str, DEFAULT_SIZES)), strategies=",".join(DEFAULT_STRATEGIES),
                           tile=DEFAULT_TILE, preset=None, image=None)
    for k, v in given.items():
        setattr(args, k, v)
    assert _resolve_suite(args) == suite


def test_seed001_isolated_runs_each_preset_in_its_own_process():
    from jobs.bench.suites.paper import seed001_isolated
    img = (np.arange(16 * 16 * 3).reshape(16, 16, 3) % 200).astype(np.uint8)
    rows = seed001_isolated([("ramp@16", img)], ("bfv-4096",))
    (r,) = rows
    assert r.scheme == "bfv" and r.exact_fraction == 1.0 and r.mse == 0
    assert r.driver_peak_rss_op > 10 * 2**20 and "own process" in r.extra
