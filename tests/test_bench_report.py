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

from bench.command import resolve_suite
from bench.peakmem import PeakMeter, reset_peak
from bench.report import load_rows, render
from bench.schemas import BENCH, BENCH_DFT, BENCH_INFER
from jobs.cli import main

EXPERIMENTS = {"fig3", "fig10", "brightness60", "limits", "packed"}


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
    rows = [r for r in bench[2] if r["experiment"] in ("fig3", "fig10", "brightness60") and r["encrypt_seconds"] is not None]
    assert rows
    for r in rows:
        assert r["encrypt_seconds"] > 0 and r["decrypt_seconds"] > 0
        assert r["driver_peak_rss_encrypt"] > 10 * 2**20 and r["driver_peak_rss_decrypt"] > 10 * 2**20
        assert r["workers_peak_rss_encrypt"] is None      # one process: no workers
    for r in (r for r in rows if r["experiment"] == "brightness60"):
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


def test_brightness60_scores_against_the_plaintext_result_per_scheme(bench):
    bright = [r for r in bench[2] if r["experiment"] == "brightness60"]
    assert sorted(r["scheme"] for r in bright) == ["bfv", "bgv", "ckks"]
    for r in bright:
        assert r["reference"] == "plaintext-processed" and r["ops"] == "brightness:60"
        assert r["ssim"] > 0.99 and r["exact_fraction"] > 0.99
    assert all(r["mse"] == 0 for r in bright if r["scheme"] in ("bfv", "bgv"))


def test_limits_split_the_packed_time(bench):
    lim = [r for r in bench[2] if r["experiment"] == "limits"]
    assert any(r["implementation"] == "numpy-memcpy" and r["bytes_per_second"] > 1e8 for r in lim)
    packed = [r for r in lim if r["layout"] == "packed"]
    assert packed and all(r["encode_seconds"] > 0 and r["encrypt_seconds"] > 0 and r["serialize_seconds"] > 0
                          for r in packed)


def test_report_fills_every_section_and_draws_the_plots(report):
    rep, md = report
    for png in ("fig3.png", "fig10.png", "brightness60.png", "limits.png", "packed.png"):
        assert (rep / png).stat().st_size > 1000
    for title in ("Fig. 3", "Table 2", "Fig. 10", "TenSEAL study", "Physical limits", "Packed layout"):
        assert title in md
    # Only the secure fast path (absent from this table), TFHE, the Spark run (in tests/test_notebook.py's
    # table, not this one's) and the dft / infer / tfhe suites (tables of their own) may be missing
    missing = [line for line in md.splitlines() if "not measured" in line]
    allowed = ("symmetric fast path", "TFHE", "Spark step", "--suite dft", "--suite infer", "--suite tfhe")
    assert all(any(a in line for a in allowed) for line in missing), missing
    assert "bench --suite tfhe" in md        # TFHE: where its figures come from


def test_report_names_the_papers_and_never_by_number(report):
    from bench import seeds
    md = report[1]
    for paper in seeds.PAPERS:
        assert paper.title in md
    assert not re.search(r"seed ?00\d", md, re.IGNORECASE)


def test_the_packed_section_compares_with_tenseal_in_both_serialisations(report):
    pytest.importorskip("tenseal")
    md = report[1]
    assert re.search(r"\| tenseal \| paper-4096 \| public \| zstd \|", md)
    assert re.search(r"\| tenseal \| paper-4096 \| public \| none \|", md)
    assert "x TenSEAL uncompressed" in md


def test_headline_figures_are_the_table_s(bench, report):
    rows, md = bench[2], report[1]
    full = [r["speedup_vs_fresh"] for r in rows if r["experiment"] == "fig3" and not r["extrapolated"]
            and r["layout"] == "pixel" and r["strategy"] == "full"]
    line = next(l for l in md.splitlines() if l.startswith("| full over fresh, best size"))
    assert f"| {max(full):.2f} |" in line
    f10 = [r["speedup_vs_fresh"] for r in rows if r["experiment"] == "fig10" and r["strategy"] == "full"]
    line = next(l for l in md.splitlines() if l.startswith("| full over fresh, average"))
    assert f"| {np.mean(f10):.2f} |" in line and "over 2 USC-SIPI" in line
    ckks = next(r for r in rows if r["experiment"] == "brightness60" and r["scheme"] == "ckks")
    line = next(l for l in md.splitlines() if l.startswith("| TenSEAL study CKKS SSIM"))
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
    md = _rewrite(bench, tmp_path, lambda df: df[~df.experiment.isin(["brightness60", "fig10"])])
    assert "## The TenSEAL study" in md and "**not measured** (no DIV2K images found)" in md
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
    ({}, "all"), ({"sizes": [8]}, "pixel"), ({"preset": "addonly-2048"}, "pixel"), ({"suite": "ops"}, "ops"),
])
def test_the_default_suite_is_all_unless_a_pixel_option_is_given(given, suite):
    args = SimpleNamespace(suite=None, sizes=None, strategies=None, tile=None, preset=None, image=None)
    for k, v in given.items():
        setattr(args, k, v)
    assert resolve_suite(args) == suite


def test_brightness60_isolated_runs_each_preset_in_its_own_process():
    from bench.suites.paper import brightness60_isolated
    img = (np.arange(16 * 16 * 3).reshape(16, 16, 3) % 200).astype(np.uint8)
    rows = brightness60_isolated([("ramp@16", img)], ("bfv-4096",))
    (r,) = rows
    assert r.scheme == "bfv" and r.exact_fraction == 1.0 and r.mse == 0
    assert r.driver_peak_rss_op > 10 * 2**20 and "own process" in r.extra


# --- the dft and infer tables next to the bench table ------------------------------------------------

def _suite_tables(folder):
    """bench_dft and bench_infer tables of two rows each, for the report's rendering only."""
    from bench.rows import run_columns, write_rows
    from jobs.runtime import runinfo

    run_id = runinfo.new_run_id()
    common = run_columns(run_id)
    dft = [dict(n=n, preset="dft-8192", ring=8192, stages=stages, levels=2, inverse_levels=2, depth=4, rotations=10,
                plaintext_products=20, cutoff=0.5, keygen_seconds=2.0, encrypt_seconds=0.01, build_seconds=0.02,
                encode_seconds=0.1, pipeline_seconds=0.3, warm_seconds=0.2, decrypt_seconds=0.01,
                end_to_end_seconds=0.34, max_abs_err=1e-5, rel_err=1e-7, seed_seconds=seed,
                speedup_vs_seed=seed / 0.34, ciphertext_bytes=1000)
           for n, stages, seed in ((256, "fold", 9.43), (1024, "three", 104.12))]
    infer = [dict(model=model, task="01", classes=2, scheme=scheme, preset=preset, ring=4096, layout=layout,
                  samples=108, ciphertexts=64, ciphertext_bytes=1_000_000, bytes_per_sample=9259.0,
                  train_seconds=0.1, keygen_seconds=1.0, encrypt_seconds=0.1, infer_seconds=0.2,
                  infer_warm_seconds=0.1, decrypt_seconds=0.01, samples_per_second=1080.0,
                  end_to_end_samples_per_second=350.0, ms_per_sample=2.86, single_sample_ms=ms,
                  single_sample_infer_ms=ms / 2, single_sample_layout=layout, single_sample_repeats=3,
                  accuracy_plain=1.0, accuracy_encrypted=1.0, agreement=1.0, max_abs_err=1e-4,
                  seed_samples_per_second=paper_rate, seed_ms_per_sample=paper_ms, seed_accuracy=1.0,
                  seed_bytes_per_sample=432469.0, latency_vs_seed=paper_ms / ms, throughput_vs_seed=350.0 / paper_rate)
             for model, scheme, preset, layout, ms, paper_ms, paper_rate in (
                 ("logreg", "ckks", "paper-4096", "block-128", 20.0, 12.37, 80.87),
                 ("logreg", "bfv", "bfv-4096", "pixel-per-ciphertext", 50.0, 2.55, 391.64))]
    write_rows(dft, BENCH_DFT, folder / "bench_dft", run_id, common)
    write_rows(infer, BENCH_INFER, folder / "bench_infer", run_id, common)


def test_report_of_the_dft_and_infer_tables_alone(tmp_path):
    _suite_tables(tmp_path / "out")
    assert main(["report", "--bench", str(tmp_path / "out"), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    for png in ("dft.png", "infer.png"):
        assert (tmp_path / "rep" / png).stat().st_size > 1000
    # DFT: end to end next to the pipeline alone, the ratio from end to end
    line = next(l for l in md.splitlines() if l.startswith("| 256 |"))
    assert "| 0.340 |" in line and "| 9.43 |" in line and f"| {9.43 / 0.34:.3g} |" in line
    # inference: one sample against the paper's latency, the batch against its throughput
    line = next(l for l in md.splitlines() if l.startswith("| logreg | 01 | paper-4096 |"))
    assert "| 20.00 | 12.37 |" in line and f"| {12.37 / 20:.3g} |" in line
    assert "| 350 | 80.87 |" in line and f"| {350 / 80.87:.3g} |" in line
    assert "Faster Homomorphic Evaluation of Discrete Fourier Transforms" in md


def test_report_of_bench_dft_and_infer_together(bench, tmp_path):
    import shutil
    out = tmp_path / "all"
    shutil.copytree(bench[0] / "bench", out / "bench")
    _suite_tables(out)
    assert main(["report", "--bench", str(out), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## iCHEETAH Fig. 3" in md and "## DFT-Hadamard-iDFT" in md and "## Encrypted inference" in md
    assert "Suites beside the bench table: dft, infer." in md


def test_report_without_any_table_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no bench tables"):
        main(["report", "--bench", str(tmp_path / "empty"), "--out", str(tmp_path / "rep")])
