"""`hepix bench --suite tfhe` (measured on a crop, extrapolated and marked so) and its place in `hepix report`."""
from __future__ import annotations

import math

import pyarrow.dataset as ds
import pytest

from bench.report import BENCH_TFHE, load_suite, tfhe_stages
from bench.schemas import BENCH_TABLES
from jobs.cli import main

VALUES_512 = 512 * 512 * 3


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--suite", "tfhe", "--quick", "--out", str(out)]) == 0
    return out, ds.dataset(out / "bench_tfhe", format="parquet").to_table()


def test_the_rows_have_the_schema_and_every_stage(bench):
    _out, t = bench
    assert t.schema.remove_metadata().equals(BENCH_TABLES["bench_tfhe"])
    rows = t.to_pylist()
    got = {(r["stage"], r["op"], r["variant"]) for r in rows}
    assert {("encrypt", "", "seeded"), ("encrypt", "", "full"), ("encrypt", "", "list"), ("decrypt", "", "seeded"),
            ("op", "brightness:60", "nibble"), ("op", "threshold:128", "nibble")} <= got
    assert {r["image"] for r in rows if r["stage"] != "ckks-sign"} == {"astronaut[32:34,400:402]"}


def test_the_ckks_sign_rows_measure_the_error_on_the_crop_and_a_full_ciphertext(bench):
    sign = [r for r in bench[1].to_pylist() if r["stage"] == "ckks-sign"]
    assert [(r["image"], r["pixels"]) for r in sign] == [("astronaut[32:34,400:402]", 12),
                                                         ("astronaut[32:96,400:464], first 4096 values", 4096)]
    for r in sign:
        assert r["op"] == "threshold:128" and r["variant"] == "f3@dft-8192" and r["preset"] == "dft-8192"
        assert r["exact"] is None and r["seconds_per_pixel"] > 0
        assert 0 < r["max_abs_err"] <= 255 and r["max_err_vs_polynomial"] < 1
        assert r["wrong_side_fraction"] == 0 and 0 < r["off_fraction"] <= 1 and r["off_band"] > 0


def test_measured_per_value_figures_are_extrapolated_and_marked(bench):
    rows = [r for r in bench[1].to_pylist() if r["stage"] != "keygen"]
    for r in rows:
        assert r["extrapolated"] is True and r["seconds_per_pixel"] > 0 and r["peak_rss_mb"] > 10
        assert math.isclose(r["extrapolated_512x512x3_seconds"], r["seconds_per_pixel"] * VALUES_512)
    assert all(r["exact"] for r in rows if r["stage"] in ("op", "decrypt"))
    seeded = next(r for r in rows if r["stage"] == "encrypt" and r["variant"] == "seeded")
    assert seeded["bytes_per_pixel"] == 871
    key = next(r for r in bench[1].to_pylist() if r["stage"] == "keygen")
    assert key["extrapolated"] is False and key["server_key_bytes"] > key["compressed_server_key_bytes"] > 0


def test_the_report_shows_the_measured_tfhe_figures(bench, tmp_path):
    out, t = bench
    assert main(["report", "--bench", str(out), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "report.md").read_text()
    section = md[md.index("## TFHE"):]
    assert "not measured" not in section.split("## What is")[0]
    op = next(r for r in t.to_pylist() if r["op"] == "brightness:60")
    assert f"{op['extrapolated_512x512x3_seconds']:,.0f}" in section and "extrapolated" in section
    assert "Against the TenSEAL study's TFHE figures" in section and "+60 (saturating)" in section
    big = next(r for r in t.to_pylist() if r["stage"] == "ckks-sign" and r["pixels"] == 4096)
    assert (f"threshold:128 by f3@dft-8192 on {big['image']} (4096 values): {big['ms_per_pixel']:.4f} ms/value"
            in section and f"max |error| {big['max_abs_err']:.1f} of 255" in section)
    stages = tfhe_stages(load_suite(out, BENCH_TFHE))
    assert stages["seconds"][1] == op["extrapolated_512x512x3_seconds"] and stages["exact"]
